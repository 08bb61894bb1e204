# cmake/bert.cmake — BLAS for the BERT encoder's dense layers
# (src/model/bert/gemm.cc). include() it after attnflow_lib is defined.
# With OpenBLAS found, LinearForward calls cblas_sgemm; without it the
# builtin blocked kernel is used (same results within fp32 rounding).
# Debian: libopenblas-dev (declared in tools/deps/models.apt).
set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
if(BLAS_FOUND)
  message(STATUS "attnflow: BERT GEMM uses OpenBLAS (${BLAS_LIBRARIES})")
  target_compile_definitions(attnflow_lib PRIVATE ATTNFLOW_HAVE_CBLAS ATTNFLOW_HAVE_OPENBLAS)
  # attnflow_lib is static: PRIVATE still propagates the link to executables.
  target_link_libraries(attnflow_lib PRIVATE ${BLAS_LIBRARIES})
else()
  message(STATUS "attnflow: OpenBLAS not found; BERT GEMM uses the builtin kernel")
endif()
