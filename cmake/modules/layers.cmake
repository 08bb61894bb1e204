# cmake/modules/layers.cmake — the layer table of the library, enforced.
#
# Each layer is one static library attnflow_<layer> over src/<layer>/**.cc
# that links only the layers below it (ATTNFLOW_DEPS_<layer>). Because a
# static library can still include any header on the include path, this
# file also checks every #include at configure time: a source of layer L (or
# a public header owned by L) may include only headers of L itself, of the
# layers in ATTNFLOW_DEPS_L, and external ones (hwy/, nlohmann/, <...>).
# tools/cli may include only public headers (include/attnflow/) and its own.
# A wrong include stops the configure with the file, the line and the rule.
#
# Bottom to top (DEVELOPERS.md has the same table in prose):
set(ATTNFLOW_LAYERS core io reference kernels ops nn model golden trace player bench)
set(ATTNFLOW_DEPS_core "")
set(ATTNFLOW_DEPS_io core)
set(ATTNFLOW_DEPS_reference core)
set(ATTNFLOW_DEPS_kernels core reference)
set(ATTNFLOW_DEPS_ops core io)
set(ATTNFLOW_DEPS_nn core io reference kernels)
set(ATTNFLOW_DEPS_model core io reference kernels ops)
set(ATTNFLOW_DEPS_golden core io reference kernels nn micro)
set(ATTNFLOW_DEPS_trace core io reference kernels ops nn model)
# player: the page (page JSON, the HTML player, the stage table) and the
# trace's exports; golden for the safetensors export (a golden case).
set(ATTNFLOW_DEPS_player core io golden trace)
set(ATTNFLOW_DEPS_bench core reference kernels)

# Layers with a build of their own (cmake/<feature>.cmake), checked the same
# way: dist (MPI, cmake/dist.cmake), micro (C99, cmake/micro.cmake).
set(ATTNFLOW_EXTRA_LAYERS dist micro)
set(ATTNFLOW_DEPS_dist core reference kernels)
set(ATTNFLOW_HEADERS_dist dist)
# micro: the heap-free C99 library of micro/ (cmake/micro.cmake), used by the
# golden layer's device export (export-c checks cases with the library's own
# validation and int8 preparation).
set(ATTNFLOW_DEPS_micro "")
set(ATTNFLOW_HEADERS_micro micro)

# Which layer owns each public header include/attnflow/<name>.h.
set(ATTNFLOW_HEADERS_core status tensor semantics stages threading attention rng compare)
set(ATTNFLOW_HEADERS_io device_dump file_util gguf image npy safetensors)
set(ATTNFLOW_HEADERS_reference reference)
set(ATTNFLOW_HEADERS_kernels kernels)
set(ATTNFLOW_HEADERS_ops ops)
set(ATTNFLOW_HEADERS_nn nn nn_align nn_budget nn_golden nn_transfo_xl nn_vit)
set(ATTNFLOW_HEADERS_model model sampling)
set(ATTNFLOW_HEADERS_golden golden device_export)
set(ATTNFLOW_HEADERS_trace trace)
set(ATTNFLOW_HEADERS_player player)
set(ATTNFLOW_HEADERS_bench bench)

function(attnflow_header_layer header out)
  foreach(layer ${ATTNFLOW_LAYERS} ${ATTNFLOW_EXTRA_LAYERS})
    if(header IN_LIST ATTNFLOW_HEADERS_${layer})
      set(${out} ${layer} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# Checks the quoted includes of `file` against the layers in `allowed`
# (list). Internal includes are "<layer>/..." (src/<layer>/), public ones
# "attnflow/<name>.h".
function(attnflow_check_includes file owner allowed)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" inc "${line}")
    if(inc MATCHES "^attnflow/([a-z_0-9]+)\\.h$")
      attnflow_header_layer(${CMAKE_MATCH_1} layer)
      if(layer STREQUAL "")
        message(FATAL_ERROR "layers: ${file}: includes \"${inc}\", a public header no layer owns "
                            "(add it to ATTNFLOW_HEADERS_<layer> in cmake/modules/layers.cmake)")
      endif()
    elseif(inc MATCHES "^([a-z_0-9]+)/")
      set(layer ${CMAKE_MATCH_1})
      if(NOT layer IN_LIST ATTNFLOW_LAYERS AND NOT layer IN_LIST ATTNFLOW_EXTRA_LAYERS)
        continue()  # external (hwy/, nlohmann/, gtest/, ...)
      endif()
    else()
      continue()  # same-directory include
    endif()
    if(NOT layer STREQUAL owner AND NOT layer IN_LIST allowed)
      message(FATAL_ERROR "layers: ${file} (layer ${owner}) includes \"${inc}\" of layer ${layer}; "
                          "${owner} may use only: ${owner} ${allowed} (cmake/modules/layers.cmake)")
    endif()
  endforeach()
endfunction()

function(attnflow_check_layering)
  foreach(layer ${ATTNFLOW_LAYERS} ${ATTNFLOW_EXTRA_LAYERS})
    file(GLOB_RECURSE files ${CMAKE_SOURCE_DIR}/src/${layer}/*.cc ${CMAKE_SOURCE_DIR}/src/${layer}/*.h)
    foreach(h ${ATTNFLOW_HEADERS_${layer}})
      list(APPEND files ${CMAKE_SOURCE_DIR}/include/attnflow/${h}.h)
    endforeach()
    foreach(f ${files})
      attnflow_check_includes(${f} ${layer} "${ATTNFLOW_DEPS_${layer}}")
    endforeach()
  endforeach()
  # The CLI sees only the public API.
  file(GLOB cli ${CMAKE_SOURCE_DIR}/tools/cli/*.cc ${CMAKE_SOURCE_DIR}/tools/cli/*.h)
  foreach(f ${cli})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" inc "${line}")
      if(NOT inc MATCHES "^attnflow/" AND inc MATCHES "/")
        message(FATAL_ERROR "layers: ${f} includes \"${inc}\"; the CLI may include only "
                            "public headers (attnflow/...) and its own files")
      endif()
    endforeach()
  endforeach()
endfunction()

# The repository root, from this file's own place (the fuzz build includes
# this module from fuzz/, where CMAKE_SOURCE_DIR is not the root).
get_filename_component(ATTNFLOW_REPO_ROOT "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

# The attention player page (web/player.html with the stage table
# src/player/stage_table.json, web/lab.css and web/lab.js) and the stage
# table as C++ data, compiled into the player layer: generated at build
# time, never committed. Sets <out_var> to the source.
function(attnflow_player_source out_var)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(out ${CMAKE_BINARY_DIR}/generated/player_html.cc)
  add_custom_command(
    OUTPUT ${out}
    COMMAND Python3::Interpreter ${ATTNFLOW_REPO_ROOT}/web/embed_player.py ${out}
    DEPENDS ${ATTNFLOW_REPO_ROOT}/web/player.html ${ATTNFLOW_REPO_ROOT}/web/lab.js
            ${ATTNFLOW_REPO_ROOT}/web/lab.css ${ATTNFLOW_REPO_ROOT}/web/embed_player.py
            ${ATTNFLOW_REPO_ROOT}/src/player/stage_table.json
    COMMENT "Embedding web/player.html (+ the stage table, web/lab.css, web/lab.js)")
  set(${out_var} ${out} PARENT_SCOPE)
endfunction()

# One static library per layer.
function(attnflow_add_layers)
  foreach(layer ${ATTNFLOW_LAYERS})
    file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${layer}/*.cc)
    if(layer STREQUAL "player")
      attnflow_player_source(player)
      list(APPEND srcs ${player})
    endif()
    add_library(attnflow_${layer} STATIC ${srcs})
    target_include_directories(attnflow_${layer} PUBLIC ${CMAKE_SOURCE_DIR}/include
                               PRIVATE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(attnflow_${layer} PUBLIC Threads::Threads
                          PRIVATE hwy::hwy nlohmann_json::nlohmann_json)
    foreach(dep ${ATTNFLOW_DEPS_${layer}})
      target_link_libraries(attnflow_${layer} PUBLIC attnflow_${dep})
    endforeach()
    target_compile_options(attnflow_${layer} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  endforeach()
endfunction()
