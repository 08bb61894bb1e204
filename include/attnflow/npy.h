// attnflow/npy.h — NumPy .npy files (format version 1.0), for exporting
// embeddings and other results to Python.
//
// Invariants:
//  * Written files are C-order, little-endian, with the header padded with
//    spaces and a final '\n' so that the data starts at a multiple of 64
//    bytes (what numpy itself writes); numpy.load reads them unchanged.
//  * WriteNpy is atomic (WriteFileAtomic): a failed write leaves nothing
//    behind and an existing file untouched.
//  * The reader is strict: only version 1.0/2.0 headers, little-endian (or
//    byte-order-free) F32/F64/I64/I32/I8/U8/BOOL, fortran_order False, rank <= 4,
//    and a data size that matches the shape exactly; anything else is an
//    error naming the file. No exception escapes.
#pragma once

#include <string>
#include <vector>

#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow {

// The bytes of a .npy file holding `t` (any strides; stored row-major).
// Supported dtypes: F32 F64 I64 I32 I8 U8 BOOL (kUnimplemented otherwise).
Result<std::vector<uint8_t>> EncodeNpy(const TensorView& t);

// Writes `t` to `path` atomically. kIoError names the path on failure.
Status WriteNpy(const std::string& path, const TensorView& t);

// Reads a .npy file into an owned tensor. `label` names the input in errors
// (defaults to the path).
Result<Tensor> ReadNpy(const std::string& path);
Result<Tensor> DecodeNpy(const std::vector<uint8_t>& bytes,
                         const std::string& label = "<buffer>");

}  // namespace attnflow
