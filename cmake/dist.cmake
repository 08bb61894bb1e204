# cmake/dist.cmake — distributed attention over MPI (src/dist/, include/attnflow/dist.h,
# tools/cli/cmd_ring.cc, tests/dist/). Built only when MPI is found; Debian packages in
# tools/deps/mpi.apt (openmpi-bin, libopenmpi-dev). Without MPI nothing here is built and
# `attnflow ring` says so. Included from CMakeLists.txt after attnflow_lib exists; the CLI
# target is defined later, so it is linked in a deferred call.
#
# Tests (label "mpi", so the ASan/TSan runs, which select label "unit", skip them):
# every tests/dist/*_test.cc is an MPI program run as `mpirun -np P` for P in its list.
find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND)
  message(STATUS "attnflow: MPI not found; distributed attention (attnflow ring) not built")
  return()
endif()
message(STATUS "attnflow: distributed attention over MPI (${MPIEXEC_EXECUTABLE})")
file(GLOB_RECURSE ATTNFLOW_DIST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/dist/*.cc)
add_library(attnflow_dist STATIC ${ATTNFLOW_DIST_SOURCES})
target_include_directories(attnflow_dist PUBLIC ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(attnflow_dist PUBLIC attnflow_lib MPI::MPI_C Threads::Threads)
# The C API only (mpi.h from C++): no deprecated MPI C++ bindings.
target_compile_definitions(attnflow_dist PUBLIC OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
target_compile_options(attnflow_dist PRIVATE -Wall -Wextra -Wno-unused-parameter)

function(_attnflow_dist_link_cli)
  if(TARGET attnflow)
    target_link_libraries(attnflow PRIVATE attnflow_dist)
    target_compile_definitions(attnflow PRIVATE ATTNFLOW_HAVE_DIST=1)
  endif()
endfunction()
cmake_language(DEFER CALL _attnflow_dist_link_cli)

if(ATTNFLOW_BUILD_TESTS)
  find_package(GTest REQUIRED)
  # CI runs as root in a container: --allow-run-as-root (here, not in user docs);
  # containers often forbid the cross-process copy (CMA) that Open MPI's
  # shared-memory transport tries first (ptrace-restricted), so it is off.
  set(ATTNFLOW_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root
      --mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none --bind-to none)
  file(GLOB ATTNFLOW_DIST_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/dist/*_test.cc)
  foreach(src ${ATTNFLOW_DIST_TESTS})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(${name} PRIVATE attnflow_dist GTest::gtest)
    foreach(np 2 3 4)
      add_test(NAME mpi.${name}.np${np}
               COMMAND ${ATTNFLOW_MPIRUN} -np ${np} $<TARGET_FILE:${name}>)
      set_tests_properties(mpi.${name}.np${np} PROPERTIES LABELS mpi TIMEOUT 300
                           PROCESSORS 2 ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1")
    endforeach()
  endforeach()
  # Failure behaviour: kill / stall one rank of the CLI mid-run (tests/dist/ring_fail.sh).
  add_test(NAME mpi.ring_fail
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/dist/ring_fail.sh $<TARGET_FILE:attnflow>
                   "${ATTNFLOW_MPIRUN}")
  set_tests_properties(mpi.ring_fail PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2)
  # Hostile starts (tests/regress/generators/ring.sh) and `ring verify CASE` on
  # the golden cases (tests/dist/ring_hostile.sh).
  add_test(NAME mpi.ring_hostile
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/dist/ring_hostile.sh $<TARGET_FILE:attnflow>
                   "${ATTNFLOW_MPIRUN}" ${CMAKE_SOURCE_DIR})
  set_tests_properties(mpi.ring_hostile PROPERTIES LABELS mpi TIMEOUT 600 PROCESSORS 2)
endif()
