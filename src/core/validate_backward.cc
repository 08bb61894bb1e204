// validate_backward.cc — boundary validation of the attention backward
// (reference::SdpaBackward, AttentionBackward).
//
// Invariant: after ValidateSdpaBackward returns Ok, every index computed
// from SdpaDims into dout, dq, dk and dv is in bounds (on top of
// ValidateSdpa's guarantees for the forward arguments). Errors name the
// operation and the shapes.
#include <string>

#include "attnflow/attention.h"

namespace attnflow {
namespace {

std::string Dims4(int64_t a, int64_t b, int64_t c, int64_t d) {
  return "[" + std::to_string(a) + "," + std::to_string(b) + "," + std::to_string(c) + "," +
         std::to_string(d) + "]";
}

Status CheckGrad(const char* op, const char* name, const TensorView& t, int64_t a, int64_t b,
                 int64_t c, int64_t d, bool optional) {
  if (t.empty_view()) {
    if (optional) return Status::Ok();
    return InvalidArgument(std::string(op) + ": " + name + " is required");
  }
  if (t.rank != 4 || t.shape[0] != a || t.shape[1] != b || t.shape[2] != c || t.shape[3] != d) {
    return InvalidArgument(std::string(op) + ": " + name + " " + t.shape_string() + " should be " +
                           Dims4(a, b, c, d));
  }
  for (int i = 0; i < 4; ++i) {
    if (t.strides[i] < 0) {
      return InvalidArgument(std::string(op) + ": " + name + " " + t.shape_string() +
                             " has a negative stride");
    }
  }
  if (t.numel() > 0 && t.data == nullptr) {
    return InvalidArgument(std::string(op) + ": " + name + " " + t.describe() + " has no data");
  }
  if (optional ? (t.dtype != DType::kF32 && t.dtype != DType::kF64) : !IsFloat(t.dtype)) {
    return InvalidArgument(std::string(op) + ": " + name + " must be " +
                           (optional ? "F32 or F64" : "float") + ", got " + t.describe());
  }
  return Status::Ok();
}

}  // namespace

Status ValidateSdpaBackward(const char* op, const TensorView& dq, const TensorView& dk,
                            const TensorView& dv, const TensorView& dout, const TensorView& dlse,
                            const TensorView& out, const TensorView& lse, const TensorView& q,
                            const TensorView& k, const TensorView& v, const SdpaOptions& opt,
                            SdpaDims* dims) {
  SdpaDims d{};
  ATTNFLOW_RETURN_IF_ERROR(ValidateSdpa(op, out, lse, q, k, v, opt, &d));
  ATTNFLOW_RETURN_IF_ERROR(
      CheckGrad(op, "dout", dout, d.batch, d.num_heads, d.q_len, d.v_dim, false));
  if (!dlse.empty_view()) {
    if (dlse.rank != 3 || dlse.shape[0] != d.batch || dlse.shape[1] != d.num_heads ||
        dlse.shape[2] != d.q_len || !IsFloat(dlse.dtype) || dlse.strides[0] < 0 ||
        dlse.strides[1] < 0 || dlse.strides[2] < 0 || (dlse.numel() > 0 && dlse.data == nullptr)) {
      return InvalidArgument(std::string(op) + ": dlse " + dlse.describe() +
                             " should be float [B,H,Lq] = [" + std::to_string(d.batch) + "," +
                             std::to_string(d.num_heads) + "," + std::to_string(d.q_len) + "]");
    }
  }
  ATTNFLOW_RETURN_IF_ERROR(
      CheckGrad(op, "dq", dq, d.batch, d.num_heads, d.q_len, d.head_dim, true));
  ATTNFLOW_RETURN_IF_ERROR(
      CheckGrad(op, "dk", dk, d.batch, d.num_kv_heads, d.kv_len, d.head_dim, true));
  ATTNFLOW_RETURN_IF_ERROR(
      CheckGrad(op, "dv", dv, d.batch, d.num_kv_heads, d.kv_len, d.v_dim, true));
  if (dims != nullptr) *dims = d;
  return Status::Ok();
}

}  // namespace attnflow
