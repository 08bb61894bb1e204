// ops/embedding.cc — token embedding lookup (ops::EmbeddingLookup).
//
// y[t] = table[ids[t]] for a table of any GGUF row type: F32 rows are
// copied, quantised rows dequantised exactly as gguf-py (io/gguf.cc
// DequantizeRow). Ids are validated before their row is read: an id outside
// the table is an OutOfRange error naming the token index and the table.
#include "attnflow/ops.h"

namespace attnflow::ops {

Status EmbeddingLookup(float* y, int64_t ldy, const int32_t* ids, const QMatrix& table,
                       int64_t tokens) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t id = ids[t];
    if (id < 0 || id >= table.rows) {
      return OutOfRange("ops::EmbeddingLookup: ids[" + std::to_string(t) + "] = " +
                        std::to_string(id) + " is outside [0, " + std::to_string(table.rows) +
                        ") of " + (table.name.empty() ? std::string("the table") : table.name) +
                        " [" + std::to_string(table.rows) + ", " + std::to_string(table.cols) +
                        "]");
    }
    Status st = DequantizeRow(y + t * ldy, table.data + id * table.row_bytes, table.type,
                              table.cols);
    if (!st.ok()) return Status(st.code(), "ops::EmbeddingLookup: " + st.message());
  }
  return Status::Ok();
}

}  // namespace attnflow::ops
