// nn/positions.cc — float64 position schemes: sinusoidal tables, token
// embeddings, learned absolute positions, RoPE (half and interleaved layouts,
// linear / NTK / dynamic-NTK scaling, offsets for decode) and the T5 bucketed
// relative bias. Formulas: attnflow/nn.h and docs/nn.md.
//
// Invariants: positions are exact integers (offset + l or position_ids);
// every angle is computed as pos·θ in double; out-of-range positions and
// ids are kOutOfRange errors naming the index, never silent clamps.
#include <cmath>
#include <string>

#include "nn/internal.h"

namespace attnflow::nn {
using internal::CheckFloat;
using internal::CheckIndex;
using internal::CheckOut;
using internal::LoadIndex;

namespace {

Status SinusoidalRows(const char* op, const TensorView& out, int64_t n,
                      const double* positions, int64_t offset,
                      const SinusoidalOptions& opt) {
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {n, -1}));
  const int64_t d = out.shape[1];
  if (opt.layout == SinusoidalLayout::kConcat && d % 2 != 0) {
    return InvalidArgument(std::string(op) + ": concat layout needs an even dim, out is " +
                           out.describe());
  }
  if (!(opt.base > 0) || !std::isfinite(opt.base)) {
    return InvalidArgument(std::string(op) + ": base must be a positive finite number, got " +
                           std::to_string(opt.base));
  }
  for (int64_t r = 0; r < n; ++r) {
    const double pos = positions != nullptr ? positions[r] : static_cast<double>(offset + r);
    if (opt.layout == SinusoidalLayout::kInterleaved) {
      for (int64_t c = 0; c < d; ++c) {
        const int64_t i = c / 2;
        const double w = std::pow(opt.base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        out.store(out.offset(r, c), c % 2 == 0 ? std::sin(pos * w) : std::cos(pos * w));
      }
    } else {
      const int64_t h = d / 2;
      for (int64_t i = 0; i < h; ++i) {
        const double w = std::pow(opt.base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        out.store(out.offset(r, i), std::sin(pos * w));
        out.store(out.offset(r, h + i), std::cos(pos * w));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status SinusoidalTable(const TensorView& out, int64_t offset, const SinusoidalOptions& opt) {
  if (out.rank != 2) {
    return InvalidArgument("sinusoidal_table: out is " + out.describe() +
                           ", expected F32/F64 [L,d]");
  }
  if (offset < 0) {
    return OutOfRange("sinusoidal_table: offset " + std::to_string(offset) + " is negative");
  }
  return SinusoidalRows("sinusoidal_table", out, out.shape[0], nullptr, offset, opt);
}

Status SinusoidalAt(const TensorView& out, const std::vector<double>& positions,
                    const SinusoidalOptions& opt) {
  return SinusoidalRows("sinusoidal_at", out, static_cast<int64_t>(positions.size()),
                        positions.data(), 0, opt);
}

Status Embed(const TensorView& out, const TensorView& ids, const TensorView& table,
             double scale) {
  const char* op = "embed";
  ATTNFLOW_RETURN_IF_ERROR(CheckIndex(op, "ids", ids, {-1, -1}));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "table", table, {-1, -1}));
  const int64_t B = ids.shape[0], L = ids.shape[1], V = table.shape[0], E = table.shape[1];
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, L, E}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t id = LoadIndex(ids, ids.offset(b, l));
      if (id < 0 || id >= V) {
        return OutOfRange(std::string(op) + ": ids[" + std::to_string(b) + "," +
                          std::to_string(l) + "] = " + std::to_string(id) +
                          " is outside the table [0, " + std::to_string(V) + ")");
      }
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t id = LoadIndex(ids, ids.offset(b, l));
      for (int64_t e = 0; e < E; ++e)
        out.store(out.offset(b, l, e), table.load(table.offset(id, e)) * scale);
    }
  return Status::Ok();
}

Status AddPositions(const TensorView& out, const TensorView& x, const TensorView& table,
                    const TensorView& position_ids, int64_t offset, double x_scale) {
  const char* op = "add_positions";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x", x, {-1, -1, -1}));
  const int64_t B = x.shape[0], L = x.shape[1], E = x.shape[2];
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "table", table, {-1, E}));
  ATTNFLOW_RETURN_IF_ERROR(CheckIndex(op, "position_ids", position_ids, {B, L}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, L, E}));
  const int64_t Pn = table.shape[0];
  auto pos_of = [&](int64_t b, int64_t l) {
    return position_ids.empty_view() ? offset + l
                                     : LoadIndex(position_ids, position_ids.offset(b, l));
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t p = pos_of(b, l);
      if (p < 0 || p >= Pn) {
        return OutOfRange(std::string(op) + ": position " + std::to_string(p) + " of [" +
                          std::to_string(b) + "," + std::to_string(l) +
                          "] is outside the table " + table.shape_string() + " (offset " +
                          std::to_string(offset) + ")");
      }
    }
  // Element-wise: out may alias x.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const int64_t p = pos_of(b, l);
      for (int64_t e = 0; e < E; ++e) {
        const double v = x.load(x.offset(b, l, e)) * x_scale + table.load(table.offset(p, e));
        out.store(out.offset(b, l, e), v);
      }
    }
  return Status::Ok();
}

// ---- RoPE -------------------------------------------------------------------

Status RopeInvFreq(std::vector<double>* inv_freq, int64_t r, const RopeOptions& opt,
                   int64_t seq_len) {
  const char* op = "rope";
  if (r <= 0 || r % 2 != 0) {
    return InvalidArgument(std::string(op) + ": rotary_dim must be a positive even number, got " +
                           std::to_string(r));
  }
  if (!(opt.theta > 0) || !std::isfinite(opt.theta)) {
    return InvalidArgument(std::string(op) + ": theta must be positive and finite, got " +
                           std::to_string(opt.theta));
  }
  if (opt.scaling != RopeScaling::kNone && (!(opt.factor > 0) || !std::isfinite(opt.factor))) {
    return InvalidArgument(std::string(op) + ": scaling factor must be positive and finite, got " +
                           std::to_string(opt.factor));
  }
  double base = opt.theta;
  const double rd = static_cast<double>(r);
  if (opt.scaling == RopeScaling::kNtk || opt.scaling == RopeScaling::kDynamicNtk) {
    if (r <= 2) {
      return InvalidArgument(std::string(op) + ": NTK scaling needs rotary_dim > 2, got " +
                             std::to_string(r));
    }
  }
  if (opt.scaling == RopeScaling::kNtk) {
    base = opt.theta * std::pow(opt.factor, rd / (rd - 2.0));
  } else if (opt.scaling == RopeScaling::kDynamicNtk) {
    if (opt.max_positions <= 0) {
      return InvalidArgument(std::string(op) + ": dynamic NTK needs max_positions > 0, got " +
                             std::to_string(opt.max_positions));
    }
    if (seq_len > opt.max_positions) {
      const double s = opt.factor * static_cast<double>(seq_len) /
                           static_cast<double>(opt.max_positions) -
                       (opt.factor - 1.0);
      base = opt.theta * std::pow(s, rd / (rd - 2.0));
    }
  }
  inv_freq->assign(static_cast<size_t>(r / 2), 0.0);
  for (int64_t c = 0; c < r / 2; ++c)
    (*inv_freq)[c] = 1.0 / std::pow(base, 2.0 * static_cast<double>(c) / rd);
  return Status::Ok();
}

Status ApplyRope(const TensorView& out, const TensorView& x, const TensorView& position_ids,
                 int64_t offset, const RopeOptions& opt) {
  const char* op = "rope";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x", x, {-1, -1, -1, -1}));
  const int64_t B = x.shape[0], H = x.shape[1], L = x.shape[2], D = x.shape[3];
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, H, L, D}));
  ATTNFLOW_RETURN_IF_ERROR(CheckIndex(op, "position_ids", position_ids, {B, L}, true));
  const int64_t r = opt.rotary_dim == 0 ? D : opt.rotary_dim;
  if (r > D || r <= 0 || r % 2 != 0) {
    return InvalidArgument(std::string(op) + ": rotary_dim " + std::to_string(r) +
                           " must be even and in [2, head_dim=" + std::to_string(D) + "] for x " +
                           x.describe());
  }
  if (offset < 0) {
    return OutOfRange(std::string(op) + ": offset " + std::to_string(offset) + " is negative");
  }
  auto pos_of = [&](int64_t b, int64_t l) {
    return position_ids.empty_view() ? offset + l
                                     : LoadIndex(position_ids, position_ids.offset(b, l));
  };
  int64_t max_pos = offset + L - 1;
  if (!position_ids.empty_view()) {
    max_pos = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = 0; l < L; ++l) max_pos = std::max(max_pos, pos_of(b, l));
  }
  const int64_t seq_len = opt.seq_len > 0 ? opt.seq_len : max_pos + 1;
  std::vector<double> inv;
  ATTNFLOW_RETURN_IF_ERROR(RopeInvFreq(&inv, r, opt, seq_len));
  const int64_t half = r / 2;
  const double pos_scale = opt.scaling == RopeScaling::kLinear ? 1.0 / opt.factor : 1.0;
  std::vector<double> row(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l) {
      const double pos = static_cast<double>(pos_of(b, l)) * pos_scale;
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t c = 0; c < D; ++c) row[c] = x.load(x.offset(b, h, l, c));
        for (int64_t c = 0; c < half; ++c) {
          const int64_t ia = opt.layout == RopeLayout::kHalf ? c : 2 * c;
          const int64_t ib = opt.layout == RopeLayout::kHalf ? c + half : 2 * c + 1;
          const double ang = pos * inv[c];
          const double cs = std::cos(ang), sn = std::sin(ang);
          const double a = row[ia], bb = row[ib];
          row[ia] = a * cs - bb * sn;
          row[ib] = bb * cs + a * sn;
        }
        for (int64_t c = 0; c < D; ++c) out.store(out.offset(b, h, l, c), row[c]);
      }
    }
  return Status::Ok();
}

// ---- T5 ---------------------------------------------------------------------

int64_t T5RelativeBucket(int64_t rel, const T5BiasOptions& opt) {
  int64_t nb = opt.num_buckets;
  int64_t bucket = 0;
  int64_t n;
  if (opt.bidirectional) {
    nb /= 2;
    if (rel > 0) bucket += nb;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;  // -min(rel, 0)
  }
  const int64_t max_exact = nb / 2;
  if (n < max_exact) return bucket + n;
  const double large =
      static_cast<double>(max_exact) +
      std::log(static_cast<double>(n) / static_cast<double>(max_exact)) /
          std::log(static_cast<double>(opt.max_distance) / static_cast<double>(max_exact)) *
          static_cast<double>(nb - max_exact);
  int64_t v = static_cast<int64_t>(large);  // truncation, as .to(torch.long)
  if (v > nb - 1) v = nb - 1;
  return bucket + v;
}

Status T5Bias(const TensorView& out, const TensorView& buckets, const TensorView& table,
              int64_t q_offset, const T5BiasOptions& opt) {
  const char* op = "t5_bias";
  if (opt.num_buckets < (opt.bidirectional ? 4 : 2) || opt.max_distance <= 0) {
    return InvalidArgument(std::string(op) + ": num_buckets=" + std::to_string(opt.num_buckets) +
                           " and max_distance=" + std::to_string(opt.max_distance) +
                           " must be positive (num_buckets >= 4 bidirectional, >= 2 otherwise)");
  }
  const int64_t nb_eff = opt.bidirectional ? opt.num_buckets / 2 : opt.num_buckets;
  if (opt.max_distance <= nb_eff / 2) {
    return InvalidArgument(std::string(op) + ": max_distance=" + std::to_string(opt.max_distance) +
                           " must exceed the exact range " + std::to_string(nb_eff / 2));
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "table", table, {opt.num_buckets, -1}));
  const int64_t H = table.shape[1];
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {H, -1, -1}));
  const int64_t Lq = out.shape[1], Lk = out.shape[2];
  if (!buckets.empty_view() &&
      (buckets.rank != 2 || buckets.shape[0] != Lq || buckets.shape[1] != Lk ||
       !(IsFloat(buckets.dtype) || buckets.dtype == DType::kI64))) {
    return InvalidArgument(std::string(op) + ": buckets is " + buckets.describe() +
                           ", expected float or I64 " + ShapeString({Lq, Lk}));
  }
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t j = 0; j < Lk; ++j) {
      const int64_t bk = T5RelativeBucket(j - (q_offset + i), opt);
      if (!buckets.empty_view()) buckets.store(buckets.offset(i, j), static_cast<double>(bk));
      for (int64_t h = 0; h < H; ++h) out.store(out.offset(h, i, j), table.load(table.offset(bk, h)));
    }
  return Status::Ok();
}

}  // namespace attnflow::nn
