# micro.cmake — the edge port kit (micro/, include/attnflow/micro.h,
# docs/edge.md): the C99 micro library built for the host, and its host test
# (micro/tests/micro_test.cc) against reference::Sdpa and the golden cases.
# Cross builds and emulator runs are tools/edge/run_edge.sh (not CMake).
# The sources come from THE list micro/sources.txt (also read by
# tools/edge/*.sh and the ESP-IDF component).
file(STRINGS ${CMAKE_SOURCE_DIR}/micro/sources.txt _af_micro_lines)
set(ATTNFLOW_MICRO_SOURCES "")
foreach(_l ${_af_micro_lines})
  string(REGEX REPLACE "#.*$" "" _l "${_l}")
  string(STRIP "${_l}" _l)
  if(_l)
    list(APPEND ATTNFLOW_MICRO_SOURCES ${CMAKE_SOURCE_DIR}/micro/${_l})
  endif()
endforeach()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/micro/sources.txt)
add_library(attnflow_micro STATIC ${ATTNFLOW_MICRO_SOURCES})
set_target_properties(attnflow_micro PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_include_directories(attnflow_micro PUBLIC ${CMAKE_SOURCE_DIR}/include)
target_compile_options(attnflow_micro PRIVATE -Wall -Wextra -Wpedantic -Werror=implicit-function-declaration)
target_link_libraries(attnflow_micro PUBLIC m)

if(ATTNFLOW_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
  foreach(t micro_test micro_opts_test micro_decoder_test micro_misuse_test)
    add_executable(${t} ${CMAKE_SOURCE_DIR}/micro/tests/${t}.cc)
    target_link_libraries(${t} PRIVATE attnflow_micro attnflow_lib GTest::gtest_main)
    target_compile_definitions(${t} PRIVATE ATTNFLOW_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
    gtest_discover_tests(${t} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS unit)
  endforeach()
endif()
