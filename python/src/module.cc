// module.cc — the compiled core of the `attnflow` Python package (nanobind).
//
// A thin binding over the public C++ API (include/attnflow/*.h); the Python
// layer (python/attnflow/*.py) does torch-compatible argument handling and
// allocates outputs, this file only converts arrays to TensorViews, calls
// the library and maps Status to Python exceptions.
//
// Invariants:
//  * Zero-copy: every array argument (NumPy, torch, any CPU DLPack producer)
//    becomes a TensorView over the caller's memory with the caller's strides
//    (DLPack strides are in elements, as TensorView's). Nothing is copied;
//    the Python layer makes the documented copies (negative strides, rank > 4).
//  * The GIL is released around every computation (kernels, reference,
//    golden, model forward passes); arrays are converted before releasing
//    it and outputs are wrapped after reacquiring it.
//  * torch tensors with the lazy negation bit (x.conj().imag, x.neg() views of
//    complex tensors: is_neg()) are resolved (resolve_neg(), a copy) before
//    their memory is read; the bit is not part of data_ptr/stride.
//  * Model objects (Encoder, Decoder) lock their mutable state (KV cache,
//    scratch) for every call: concurrent Python threads serialise on a model
//    instead of corrupting it. The GIL is released before waiting for the lock.
//  * The attention entry points run on a module pool set by set_num_threads
//    (default: the library's DefaultPool); results never depend on it.
//  * Errors keep the library's message verbatim: kInvalidArgument,
//    kOutOfRange, kCorrupt, kUnimplemented -> ValueError; kIoError ->
//    OSError; kResourceExhausted -> MemoryError; kInternal -> RuntimeError.
//    Unsupported dtypes / devices of an array -> TypeError naming the op.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/compare.h"
#include "attnflow/file_util.h"
#include "attnflow/golden.h"
#include "attnflow/kernels.h"
#include "attnflow/model.h"
#include "attnflow/ops.h"
#include "attnflow/player.h"
#include "attnflow/reference.h"
#include "attnflow/sampling.h"
#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"
#include "attnflow/threading.h"
#include "attnflow/trace.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace af = attnflow;

namespace {

using Array = nb::ndarray<nb::ro>;

[[noreturn]] void RaiseStatus(const af::Status& s) {
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case af::StatusCode::kInvalidArgument:
    case af::StatusCode::kOutOfRange:
    case af::StatusCode::kCorrupt:
    case af::StatusCode::kUnimplemented:
      type = PyExc_ValueError;
      break;
    case af::StatusCode::kIoError:
      type = PyExc_OSError;
      break;
    case af::StatusCode::kResourceExhausted:
      type = PyExc_MemoryError;
      break;
    default:
      break;
  }
  PyErr_SetString(type, s.message().c_str());
  throw nb::python_error();
}

void Check(const af::Status& s) {
  if (!s.ok()) RaiseStatus(s);
}

[[noreturn]] void RaiseType(const std::string& msg) {
  PyErr_SetString(PyExc_TypeError, msg.c_str());
  throw nb::python_error();
}

[[noreturn]] void RaiseValue(const std::string& msg) {
  PyErr_SetString(PyExc_ValueError, msg.c_str());
  throw nb::python_error();
}

// The enums the package passes as integers: their codes are the C++ enum
// values, published by name as _attnflow.CAUSAL, _attnflow.KERNELS and
// _attnflow.KV_ALIGN (the names of CausalName / KernelKindName /
// KvAlignName), so the Python side keeps no table.
constexpr af::Causal kCausals[] = {af::Causal::kNone, af::Causal::kTopLeft,
                                   af::Causal::kBottomRight};
constexpr af::KernelKind kKernels[] = {af::KernelKind::kAuto, af::KernelKind::kReference,
                                       af::KernelKind::kTiledPrefill,
                                       af::KernelKind::kSplitKvDecode};
constexpr af::KvAlign kKvAligns[] = {af::KvAlign::kPadded, af::KvAlign::kPerSequence};
af::Causal CausalOfCode(int code) {
  for (af::Causal c : kCausals)
    if (static_cast<int>(c) == code) return c;
  RaiseValue("attnflow: " + std::to_string(code) + " is not a causal code of _attnflow.CAUSAL");
}
af::KernelKind KernelOfCode(int code) {
  for (af::KernelKind k : kKernels)
    if (static_cast<int>(k) == code) return k;
  RaiseValue("attnflow: " + std::to_string(code) + " is not a kernel code of _attnflow.KERNELS");
}
af::KvAlign KvAlignOfCode(int code) {
  for (af::KvAlign a : kKvAligns)
    if (static_cast<int>(a) == code) return a;
  RaiseValue("attnflow: " + std::to_string(code) + " is not a kv_align code of _attnflow.KV_ALIGN");
}

bool ToDType(nb::dlpack::dtype t, af::DType* out) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return false;
  const auto code = static_cast<C>(t.code);
  if (code == C::Float && t.bits == 32) *out = af::DType::kF32;
  else if (code == C::Float && t.bits == 16) *out = af::DType::kF16;
  else if (code == C::Bfloat && t.bits == 16) *out = af::DType::kBF16;
  else if (code == C::Float && t.bits == 64) *out = af::DType::kF64;
  else if (code == C::Int && t.bits == 64) *out = af::DType::kI64;
  else if (code == C::Int && t.bits == 32) *out = af::DType::kI32;
  else if (code == C::Int && t.bits == 8) *out = af::DType::kI8;
  else if (code == C::UInt && t.bits == 8) *out = af::DType::kU8;
  else if (code == C::Bool && t.bits == 8) *out = af::DType::kBool;
  else return false;
  return true;
}

void CheckRank(size_t rank, const char* op, const char* name) {
  if (rank <= static_cast<size_t>(af::kMaxRank)) return;
  PyErr_SetString(PyExc_ValueError, (std::string(op) + ": " + name + " has rank " +
                                     std::to_string(rank) + ", at most 4 is supported").c_str());
  throw nb::python_error();
}

// A DLPack / buffer-protocol array (torch tensors take the faster path in
// ViewOfHandle). An absent (None) array gives an absent view (rank -1).
af::TensorView ViewOf(const Array& a, const char* op, const char* name) {
  af::TensorView v;
  if (!a.is_valid()) return v;
  if (a.device_type() != nb::device::cpu::value) {
    RaiseType(std::string(op) + ": " + name + " is not in CPU memory (DLPack device type " +
              std::to_string(a.device_type()) + "); attnflow runs on the CPU only");
  }
  if (!ToDType(a.dtype(), &v.dtype)) {
    RaiseType(std::string(op) + ": " + name + " has an unsupported dtype (DLPack code " +
              std::to_string(a.dtype().code) + ", " + std::to_string(a.dtype().bits) + " bits)");
  }
  CheckRank(a.ndim(), op, name);
  v.rank = static_cast<int>(a.ndim());
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.strides[i] = a.shape(i) == 1 ? 0 : a.stride(i);
  }
  return v;
}

// torch tensors are read through their attributes (data_ptr, shape, stride,
// dtype, is_cpu): about 5x cheaper per tensor than torch's __dlpack__. The
// attribute names are interned once.
struct TorchTypes {
  PyObject* tensor = nullptr;  // torch.Tensor (borrowed from the module)
  PyObject* dtypes[9] = {};    // indexed like af::DType
  PyObject* is_cpu = nullptr;  // interned attribute names
  PyObject* dtype = nullptr;
  PyObject* shape = nullptr;
  PyObject* stride = nullptr;
  PyObject* data_ptr = nullptr;
  PyObject* is_neg = nullptr;
  PyObject* resolve_neg = nullptr;
};

const TorchTypes* Torch() {
  static TorchTypes t;
  static bool ready = false;
  if (ready) return &t;
  PyObject* mod = PyImport_GetModule(nb::str("torch").ptr());  // only if imported
  if (mod == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  nb::module_ torch = nb::steal<nb::module_>(mod);
  t.tensor = torch.attr("Tensor").inc_ref().ptr();
  const char* names[9] = {"float32", "float16", "bfloat16", "float64", "int64",
                          "int32",   "int8",    "uint8",    "bool"};
  for (int i = 0; i < 9; ++i) t.dtypes[i] = torch.attr(names[i]).inc_ref().ptr();
  t.is_cpu = PyUnicode_InternFromString("is_cpu");
  t.dtype = PyUnicode_InternFromString("dtype");
  t.shape = PyUnicode_InternFromString("shape");
  t.stride = PyUnicode_InternFromString("stride");
  t.data_ptr = PyUnicode_InternFromString("data_ptr");
  t.is_neg = PyUnicode_InternFromString("is_neg");
  t.resolve_neg = PyUnicode_InternFromString("resolve_neg");
  ready = true;
  return &t;
}

// A new reference or the pending Python error.
nb::object Checked(PyObject* o) {
  if (o == nullptr) throw nb::python_error();
  return nb::steal(o);
}

// Keeps converted arrays (and their DLPack owners) alive during a call.
struct Arrays {
  std::vector<Array> keep;
  std::vector<nb::object> objects;  // resolved (copied) torch tensors
};

af::TensorView ViewOfHandle(nb::handle h, const char* op, const char* name, Arrays* arrays) {
  af::TensorView v;
  if (h.is_none()) return v;
  const TorchTypes* T = Torch();
  if (T != nullptr && PyObject_TypeCheck(h.ptr(), reinterpret_cast<PyTypeObject*>(T->tensor))) {
    PyObject* t = h.ptr();
    if (Checked(PyObject_CallMethodNoArgs(t, T->is_neg)).ptr() == Py_True) {
      // A lazily negated view: its memory holds -x. resolve_neg() makes the
      // values real (a copy kept alive for the call).
      arrays->objects.push_back(Checked(PyObject_CallMethodNoArgs(t, T->resolve_neg)));
      t = arrays->objects.back().ptr();
    }
    if (Checked(PyObject_GetAttr(t, T->is_cpu)).ptr() != Py_True) {
      RaiseType(std::string(op) + ": " + name + " is on device '" +
                std::string(nb::str(nb::object(h.attr("device"))).c_str()) +
                "'; attnflow runs on the CPU only (move it with .cpu())");
    }
    const nb::object dt = Checked(PyObject_GetAttr(t, T->dtype));
    int code = -1;
    for (int i = 0; i < 9; ++i) {
      if (dt.ptr() == T->dtypes[i]) code = i;
    }
    if (code < 0) {
      RaiseType(std::string(op) + ": " + name + " has an unsupported dtype " +
                std::string(nb::str(dt).c_str()));
    }
    const nb::object shape = Checked(PyObject_GetAttr(t, T->shape));        // torch.Size
    const nb::object strides = Checked(PyObject_CallMethodNoArgs(t, T->stride));  // tuple
    if (!PyTuple_Check(shape.ptr()) || !PyTuple_Check(strides.ptr()) ||
        PyTuple_GET_SIZE(shape.ptr()) != PyTuple_GET_SIZE(strides.ptr())) {
      RaiseType(std::string(op) + ": " + name + ": unexpected torch shape/stride objects");
    }
    const size_t n = static_cast<size_t>(PyTuple_GET_SIZE(shape.ptr()));
    CheckRank(n, op, name);
    v.dtype = static_cast<af::DType>(code);
    v.rank = static_cast<int>(n);
    v.data = PyLong_AsVoidPtr(Checked(PyObject_CallMethodNoArgs(t, T->data_ptr)).ptr());
    for (size_t i = 0; i < n; ++i) {
      v.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
      v.strides[i] = v.shape[i] == 1 ? 0 : PyLong_AsLongLong(PyTuple_GET_ITEM(strides.ptr(), i));
    }
    if (PyErr_Occurred()) throw nb::python_error();
    return v;
  }
  // An output (out, lse, dq, dk, dv) must be writable: a read-only buffer
  // (e.g. a NumPy array over bytes) is refused, never written through.
  const std::string_view n(name);
  if (n == "out" || n == "lse" || n == "dq" || n == "dk" || n == "dv") {
    if (PyObject_CheckBuffer(h.ptr())) {
      Py_buffer b;
      if (PyObject_GetBuffer(h.ptr(), &b, PyBUF_WRITABLE) != 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, (std::string(op) + ": " + name +
                                           " is read-only; the output must be a writable array")
                                              .c_str());
        throw nb::python_error();
      }
      PyBuffer_Release(&b);
    }
  }
  Array a;
  if (!nb::try_cast(h, a)) {
    RaiseType(std::string(op) + ": " + name + " must be a torch tensor, a NumPy array or a "
              "DLPack producer, got " + std::string(nb::str(nb::object(h.type().attr("__name__"))).c_str()));
  }
  arrays->keep.push_back(a);
  return ViewOf(a, op, name);
}

// The tensor arguments every attention entry point shares, parsed once:
// views over the caller's memory (kept alive by `arrays`) plus the options.
struct SdpaArgs {
  Arrays arrays;
  af::TensorView out, lse, q, k, v;
  af::SdpaOptions opt;
};

void ParseSdpaArgs(const char* op, nb::handle out, nb::handle lse, nb::handle q, nb::handle k,
                   nb::handle v, nb::handle mask, nb::handle kv_lens, nb::handle alibi,
                   int causal, double scale, int64_t window_left, int64_t window_right,
                   double softcap, int kv_align, SdpaArgs* a) {
  a->out = ViewOfHandle(out, op, "out", &a->arrays);
  a->lse = ViewOfHandle(lse, op, "lse", &a->arrays);
  a->q = ViewOfHandle(q, op, "query", &a->arrays);
  a->k = ViewOfHandle(k, op, "key", &a->arrays);
  a->v = ViewOfHandle(v, op, "value", &a->arrays);
  a->opt.causal = CausalOfCode(causal);
  a->opt.scale = scale;
  a->opt.attn_mask = ViewOfHandle(mask, op, "attn_mask", &a->arrays);
  a->opt.kv_lens = ViewOfHandle(kv_lens, op, "kv_lens", &a->arrays);
  a->opt.alibi_slopes = ViewOfHandle(alibi, op, "alibi_slopes", &a->arrays);
  a->opt.window_left = window_left;
  a->opt.window_right = window_right;
  a->opt.softcap = softcap;
  a->opt.kv_align = KvAlignOfCode(kv_align);
}

// The pool of the attention entry points (set_num_threads); null = the
// library's DefaultPool. Calls hold a reference for their duration.
std::mutex g_pool_mu;
std::shared_ptr<af::ThreadPool> g_pool;

std::shared_ptr<af::ThreadPool> CurrentPool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  return g_pool;
}

void SetNumThreads(int n) {
  if (n < 0) RaiseValue("attnflow.set_num_threads: n must be >= 0 (0 = the default), got " +
                        std::to_string(n));
  std::shared_ptr<af::ThreadPool> p;
  if (n > 0) {
    nb::gil_scoped_release release;
    p = std::make_shared<af::ThreadPool>(n);
  }
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_pool = std::move(p);
}

int GetNumThreads() {
  const std::shared_ptr<af::ThreadPool> p = CurrentPool();
  return p ? p->NumWorkers() : af::DefaultPool().NumWorkers();
}

// A NumPy array that owns `t` (moved to the heap).
nb::object ToNumpy(af::Tensor&& t) {
  auto* owned = new af::Tensor(std::move(t));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<af::Tensor*>(p); });
  size_t shape[af::kMaxRank];
  for (int i = 0; i < owned->rank(); ++i) shape[i] = static_cast<size_t>(owned->view().shape[i]);
  nb::dlpack::dtype dt;
  switch (owned->dtype()) {
    case af::DType::kF64: dt = nb::dtype<double>(); break;
    case af::DType::kF32: dt = nb::dtype<float>(); break;
    case af::DType::kI64: dt = nb::dtype<int64_t>(); break;
    case af::DType::kI32: dt = nb::dtype<int32_t>(); break;
    default: dt = nb::dtype<float>(); break;
  }
  nb::ndarray<nb::numpy> arr(owned->view().data, static_cast<size_t>(owned->rank()), shape,
                             owner, nullptr, dt);
  return arr.cast();
}

nb::object CopyToNumpy(const af::TensorView& v) {
  af::Result<af::Tensor> t = af::Tensor::FromView(v);
  Check(t.status());
  return ToNumpy(std::move(t).value());
}

// Collects stages with deep copies (the reference's views live only during Put).
class DictSink : public af::StageSink {
 public:
  bool Wants(std::string_view) const override { return true; }
  void Put(std::string_view stage, const af::TensorView& value) override {
    af::Result<af::Tensor> t = af::Tensor::FromView(value);
    if (!t.ok()) {
      if (status.ok()) status = t.status();
      return;
    }
    stages.emplace_back(std::string(stage), std::move(t).value());
  }
  std::vector<std::pair<std::string, af::Tensor>> stages;
  af::Status status;
};

// ---- attention ---------------------------------------------------------------

// kernel: a code of _attnflow.KERNELS (kAuto: the dispatcher chooses).
af::KernelOptions KernelOpts(int kernel, af::ThreadPool* pool) {
  af::KernelOptions ko;
  ko.pool = pool;
  ko.force = KernelOfCode(kernel);
  return ko;
}

// out/lse are caller-allocated; kernel: a code of _attnflow.KERNELS.
void Sdpa(nb::handle out, nb::handle lse, nb::handle q, nb::handle k, nb::handle v,
          nb::handle mask, nb::handle kv_lens, nb::handle alibi, int causal, double scale,
          int64_t window_left, int64_t window_right, int kernel, double softcap, int kv_align) {
  SdpaArgs a;
  ParseSdpaArgs("attnflow.scaled_dot_product_attention", out, lse, q, k, v, mask, kv_lens,
                alibi, causal, scale, window_left, window_right, softcap, kv_align, &a);
  const std::shared_ptr<af::ThreadPool> pool = CurrentPool();
  const af::KernelOptions ko = KernelOpts(kernel, pool.get());
  af::Status st;
  {
    nb::gil_scoped_release release;
    if (ko.force == af::KernelKind::kReference || a.q.dtype == af::DType::kF64) {
      st = af::reference::Sdpa(a.out, a.lse, a.q, a.k, a.v, a.opt);
    } else {
      st = af::Attention(a.out, a.lse, a.q, a.k, a.v, a.opt, ko);
    }
  }
  Check(st);
}

// The gradient: dq/dk/dv caller-allocated (None = not wanted). float64
// queries (or the "reference" kernel) run the float64 reference backward.
void SdpaBackward(nb::handle dq, nb::handle dk, nb::handle dv, nb::handle dout,
                  nb::handle dlse, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                  nb::handle lse, nb::handle mask, nb::handle kv_lens, nb::handle alibi,
                  int causal, double scale, int64_t window_left, int64_t window_right,
                  double softcap, int kv_align, int kernel) {
  const char* op = "attnflow.scaled_dot_product_attention (backward)";
  SdpaArgs a;
  ParseSdpaArgs(op, out, lse, q, k, v, mask, kv_lens, alibi, causal, scale, window_left,
                window_right, softcap, kv_align, &a);
  const af::TensorView gq = ViewOfHandle(dq, op, "dq", &a.arrays),
                       gk = ViewOfHandle(dk, op, "dk", &a.arrays),
                       gv = ViewOfHandle(dv, op, "dv", &a.arrays),
                       go = ViewOfHandle(dout, op, "dout", &a.arrays),
                       gl = ViewOfHandle(dlse, op, "dlse", &a.arrays);
  const std::shared_ptr<af::ThreadPool> pool = CurrentPool();
  const bool reference = KernelOfCode(kernel) == af::KernelKind::kReference;
  af::Status st;
  {
    nb::gil_scoped_release release;
    if (reference || a.q.dtype == af::DType::kF64) {
      st = af::reference::SdpaBackward(gq, gk, gv, go, gl, a.q, a.k, a.v, a.opt);
    } else {
      af::KernelOptions ko;
      ko.pool = pool.get();
      st = af::AttentionBackward(gq, gk, gv, go, gl, a.q, a.k, a.v, a.out, a.lse, a.opt, ko);
    }
  }
  Check(st);
}

// Variable-length batch: q [Tq,H,D], k/v [Tk,Hkv,*], out [Tq,H,Dv], lse
// [Tq,H] (a view), cu_seqlens [B+1].
// The options the FlashAttention-API entry points (varlen, its backward,
// paged) take: one assembly for all three.
af::SdpaOptions FlashOptions(const af::TensorView& alibi, int causal, double scale,
                             int64_t window_left, int64_t window_right, double softcap) {
  af::SdpaOptions opt;
  opt.alibi_slopes = alibi;
  opt.causal = CausalOfCode(causal);
  opt.scale = scale;
  opt.window_left = window_left;
  opt.window_right = window_right;
  opt.softcap = softcap;
  return opt;
}

void SdpaVarlen(nb::handle out, nb::handle lse, nb::handle q, nb::handle k, nb::handle v,
                nb::handle cu_q, nb::handle cu_k, nb::handle alibi, int causal, double scale,
                int64_t window_left, int64_t window_right, double softcap) {
  const char* op = "attnflow.flash.flash_attn_varlen_func";
  SdpaArgs a;
  a.out = ViewOfHandle(out, op, "out", &a.arrays);
  a.lse = ViewOfHandle(lse, op, "lse", &a.arrays);
  a.q = ViewOfHandle(q, op, "q", &a.arrays);
  a.k = ViewOfHandle(k, op, "k", &a.arrays);
  a.v = ViewOfHandle(v, op, "v", &a.arrays);
  const af::TensorView cq = ViewOfHandle(cu_q, op, "cu_seqlens_q", &a.arrays),
                       ck = ViewOfHandle(cu_k, op, "cu_seqlens_k", &a.arrays);
  a.opt = FlashOptions(ViewOfHandle(alibi, op, "alibi_slopes", &a.arrays), causal, scale,
                       window_left, window_right, softcap);
  const std::shared_ptr<af::ThreadPool> pool = CurrentPool();
  af::Status st;
  {
    nb::gil_scoped_release release;
    af::KernelOptions ko;
    ko.pool = pool.get();
    st = af::AttentionVarlen(a.out, a.lse, a.q, a.k, a.v, cq, ck, a.opt, ko);
  }
  Check(st);
}

void SdpaVarlenBackward(nb::handle dq, nb::handle dk, nb::handle dv, nb::handle dout,
                        nb::handle dlse, nb::handle q, nb::handle k, nb::handle v,
                        nb::handle out, nb::handle lse, nb::handle cu_q, nb::handle cu_k,
                        nb::handle alibi, int causal, double scale, int64_t window_left,
                        int64_t window_right, double softcap) {
  const char* op = "attnflow.flash.flash_attn_varlen_func (backward)";
  Arrays keep;
  auto view = [&](nb::handle h, const char* name) { return ViewOfHandle(h, op, name, &keep); };
  const af::TensorView gq = view(dq, "dq"), gk = view(dk, "dk"), gv = view(dv, "dv"),
                       go = view(dout, "dout"), gl = view(dlse, "dlse"), vq = view(q, "q"),
                       vk = view(k, "k"), vv = view(v, "v"), vo = view(out, "out"),
                       vl = view(lse, "lse"), cq = view(cu_q, "cu_seqlens_q"),
                       ck = view(cu_k, "cu_seqlens_k");
  const af::SdpaOptions opt =
      FlashOptions(view(alibi, "alibi_slopes"), causal, scale, window_left, window_right, softcap);
  const std::shared_ptr<af::ThreadPool> pool = CurrentPool();
  af::Status st;
  {
    nb::gil_scoped_release release;
    af::KernelOptions ko;
    ko.pool = pool.get();
    st = af::AttentionVarlenBackward(gq, gk, gv, go, gl, vq, vk, vv, vo, vl, cq, ck, opt, ko);
  }
  Check(st);
}

// Paged KV cache: q [B,H,Lq,D] (a view), k/v cache [blocks,page,Hkv,*].
void SdpaPaged(nb::handle out, nb::handle lse, nb::handle q, nb::handle k_cache,
               nb::handle v_cache, nb::handle block_table, nb::handle cache_seqlens,
               nb::handle alibi, int causal, double scale, int64_t window_left,
               int64_t window_right, double softcap) {
  const char* op = "attnflow.flash.flash_attn_with_kvcache";
  Arrays keep;
  auto view = [&](nb::handle h, const char* name) { return ViewOfHandle(h, op, name, &keep); };
  const af::TensorView vo = view(out, "out"), vl = view(lse, "lse"), vq = view(q, "q"),
                       kc = view(k_cache, "k_cache"), vc = view(v_cache, "v_cache"),
                       bt = view(block_table, "block_table"),
                       sl = view(cache_seqlens, "cache_seqlens");
  const af::SdpaOptions opt =
      FlashOptions(view(alibi, "alibi_slopes"), causal, scale, window_left, window_right, softcap);
  const std::shared_ptr<af::ThreadPool> pool = CurrentPool();
  af::Status st;
  {
    nb::gil_scoped_release release;
    af::KernelOptions ko;
    ko.pool = pool.get();
    st = af::AttentionPaged(vo, vl, vq, kc, vc, bt, sl, opt, ko);
  }
  Check(st);
}

std::string Explain(nb::handle out, nb::handle lse, nb::handle q, nb::handle k, nb::handle v,
                    nb::handle mask, nb::handle kv_lens, nb::handle alibi, int causal,
                    double scale, int64_t window_left, int64_t window_right, int kernel,
                    double softcap, int kv_align) {
  SdpaArgs a;
  ParseSdpaArgs("attnflow.explain", out, lse, q, k, v, mask, kv_lens, alibi, causal, scale,
                window_left, window_right, softcap, kv_align, &a);
  af::KernelChoice choice;
  const af::KernelOptions ko = KernelOpts(kernel, nullptr);
  Check(af::ExplainAttention(a.out, a.lse, a.q, a.k, a.v, a.opt, ko, &choice));
  return std::string(af::KernelKindName(choice.kernel)) + " " + choice.ToString();
}

// Float64 oracle: returns (out, lse) or, with stages, a dict of every stage.
nb::object ReferenceSdpa(nb::handle q, nb::handle k, nb::handle v, nb::handle mask,
                         nb::handle kv_lens, nb::handle alibi, int causal, double scale,
                         int64_t window_left, int64_t window_right, bool stages, double softcap,
                         int kv_align) {
  SdpaArgs a;
  ParseSdpaArgs("attnflow.reference.sdpa", nb::none(), nb::none(), q, k, v, mask, kv_lens, alibi,
                causal, scale, window_left, window_right, softcap, kv_align, &a);
  af::SdpaDims d{};
  Check(af::ValidateSdpa("reference::sdpa", {}, {}, a.q, a.k, a.v, a.opt, &d));
  af::Result<af::Tensor> out = af::Tensor::Zeros(af::DType::kF64, {d.batch, d.num_heads, d.q_len, d.v_dim});
  Check(out.status());
  af::Result<af::Tensor> lse = af::Tensor::Zeros(af::DType::kF64, {d.batch, d.num_heads, d.q_len});
  Check(lse.status());
  DictSink sink;
  af::Status st;
  {
    nb::gil_scoped_release release;
    st = af::reference::Sdpa(out->view(), lse->view(), a.q, a.k, a.v, a.opt,
                             stages ? &sink : nullptr);
  }
  Check(st);
  Check(sink.status);
  if (!stages) {
    return nb::make_tuple(ToNumpy(std::move(out).value()), ToNumpy(std::move(lse).value()));
  }
  nb::dict dict;
  for (auto& [name, t] : sink.stages) dict[name.c_str()] = ToNumpy(std::move(t));
  return dict;
}

void Merge(nb::handle out, nb::handle lse, nb::handle out_a, nb::handle lse_a,
           nb::handle out_b, nb::handle lse_b) {
  const char* op = "attnflow.merge_attention_states";
  Arrays keep;
  const af::TensorView o = ViewOfHandle(out, op, "out", &keep),
                       l = ViewOfHandle(lse, op, "lse", &keep),
                       oa = ViewOfHandle(out_a, op, "out_a", &keep),
                       la = ViewOfHandle(lse_a, op, "lse_a", &keep),
                       ob = ViewOfHandle(out_b, op, "out_b", &keep),
                       lb = ViewOfHandle(lse_b, op, "lse_b", &keep);
  af::Status st;
  {
    nb::gil_scoped_release release;
    st = af::MergeAttentionStates(o, l, oa, la, ob, lb);
  }
  Check(st);
}

// ---- golden ------------------------------------------------------------------

nb::dict StageDict(const af::StageReport& r) {
  nb::dict d;
  d["stage"] = r.stage;
  d["compared"] = r.compared;
  d["match"] = r.match;
  d["max_abs"] = r.max_abs;
  d["max_rel"] = r.max_rel;
  d["mismatches"] = r.mismatches;
  d["first_bad"] = r.first_bad;
  d["first_bad_index"] = r.first_bad_index;
  d["got_at_bad"] = r.got_at_bad;
  d["expected_at_bad"] = r.expected_at_bad;
  d["note"] = r.note;
  return d;
}

nb::dict GoldenVerify(const std::string& path, const std::string& impl) {
  af::VerifyImpl vi;
  if (impl == "reference") vi = af::VerifyImpl::kReference;
  else if (impl == "kernels") vi = af::VerifyImpl::kKernels;
  else {
    PyErr_SetString(PyExc_ValueError, ("attnflow.golden.verify: impl must be 'reference' or "
                                       "'kernels', got '" + impl + "'").c_str());
    throw nb::python_error();
  }
  af::Result<af::CaseReport> rep = af::Status();
  {
    nb::gil_scoped_release release;
    af::Result<af::GoldenCase> c = af::LoadGoldenCase(path);
    if (!c.ok()) {
      rep = c.status();
    } else if (c->kind != "sdpa" && c->kind != "mha") {
      // nn kinds: verified by their own float64 module (always the reference).
      const af::GoldenKind* k = af::FindGoldenKind(c->kind);
      if (k == nullptr || k->verify == nullptr) {
        rep = af::InvalidArgument("attnflow.golden.verify: " + path + ": unknown kind " + c->kind);
      } else {
        rep = k->verify(*c->file, -1, -1);
      }
    } else {
      rep = af::VerifyGoldenCase(*c, vi);
    }
  }
  Check(rep.status());
  nb::dict d;
  d["path"] = rep->path;
  d["kind"] = rep->kind;
  d["implementation"] = rep->implementation;
  nb::list rows;
  for (const af::StageReport& s : rep->stages) rows.append(StageDict(s));
  d["stages"] = rows;
  d["ok"] = rep->ok();
  const af::StageReport* bad = rep->FirstMismatch();
  d["first_bad_stage"] = bad != nullptr ? nb::cast(bad->stage) : nb::none();
  return d;
}

void GoldenWrite(const std::string& path, const std::string& kind, int64_t batch,
                 int64_t num_heads, int64_t num_kv_heads, int64_t q_len, int64_t kv_len,
                 int64_t head_dim, int64_t v_dim, int causal, double scale,
                 const std::string& mask, const std::vector<int64_t>& mask_shape,
                 const std::vector<int64_t>& kv_lens, int64_t window_left,
                 int64_t window_right, bool alibi, uint64_t seed,
                 const std::string& description) {
  af::GoldenSpec s;
  s.kind = kind;
  s.batch = batch;
  s.num_heads = num_heads;
  s.num_kv_heads = num_kv_heads;
  s.q_len = q_len;
  s.kv_len = kv_len;
  s.head_dim = head_dim;
  s.v_dim = v_dim;
  s.causal = CausalOfCode(causal);
  s.scale = scale;
  s.mask = mask;
  s.mask_shape = mask_shape;
  s.kv_lens = kv_lens;
  s.window_left = window_left;
  s.window_right = window_right;
  s.alibi = alibi;
  s.seed = seed;
  s.description = description;
  af::Status st;
  {
    nb::gil_scoped_release release;
    st = af::WriteGoldenCase(s, path);
  }
  Check(st);
}

// ---- models ------------------------------------------------------------------

nb::dict InfoDict(const af::ModelInfo& i) {
  nb::dict d;
  d["name"] = i.name;
  d["architecture"] = i.architecture;
  d["num_layers"] = i.num_layers;
  d["hidden"] = i.hidden;
  d["num_heads"] = i.num_heads;
  d["num_kv_heads"] = i.num_kv_heads;
  d["head_dim"] = i.head_dim;
  d["ffn_hidden"] = i.ffn_hidden;
  d["vocab_size"] = i.vocab_size;
  d["max_positions"] = i.max_positions;
  d["num_params"] = i.num_params;
  d["weight_dtype"] = i.weight_dtype;
  return d;
}

// Each model object serialises its calls: the library's models keep
// mutable state (Decoder: the KV cache and scratch; Encoder: scratch) and
// are not safe for concurrent use. Locked() releases the GIL first, then
// waits for the model's mutex, then runs f.
struct Encoder {
  std::unique_ptr<af::EncoderModel> m;
  std::mutex mu;
};

struct Decoder {
  std::unique_ptr<af::DecoderModel> m;
  std::mutex mu;
};

template <class M, class F>
auto Locked(M& model, F&& f) {
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(model.mu);
  return f();
}

Encoder* LoadEncoder(const std::string& dir) {
  af::Result<std::unique_ptr<af::EncoderModel>> r = af::Status();
  {
    nb::gil_scoped_release release;
    r = af::LoadEncoderModel(dir);
  }
  Check(r.status());
  return new Encoder{std::move(r).value()};
}

Decoder* LoadDecoder(const std::string& path, const std::string& kv_dtype, int threads,
                     int64_t max_context, bool fast_dot) {
  af::DecoderOptions o;
  if (kv_dtype == "f16") o.kv_dtype = af::DType::kF16;
  else if (kv_dtype == "bf16") o.kv_dtype = af::DType::kBF16;
  else if (kv_dtype != "f32") {
    PyErr_SetString(PyExc_ValueError, ("attnflow.SmolLM2: kv_dtype must be 'f32', 'f16' or "
                                       "'bf16', got " + af::QuoteBounded(kv_dtype)).c_str());
    throw nb::python_error();
  }
  o.num_threads = threads;
  o.max_context = max_context;
  o.fast_dot = fast_dot;  // opt-in, inexact int8-activation decode dots (docs/models-smollm2.md)
  af::Result<std::unique_ptr<af::DecoderModel>> r = af::Status();
  {
    nb::gil_scoped_release release;
    r = af::LoadDecoderModel(path, o);
  }
  Check(r.status());
  return new Decoder{std::move(r).value()};
}

// ---- trace (the attention player) --------------------------------------------

// source: "toy" (model None), or an Encoder / Decoder. Returns the trace as
// Python data; writes the self-contained HTML player to html_path if given.
// One trace as Python data (everything but the page).
nb::dict TraceDict(const af::trace::Trace& tr) {
  nb::dict d;
  d["source"] = tr.source;
  d["model"] = tr.info.name;
  d["description"] = tr.description;
  d["layer"] = tr.layer;
  d["causal"] = std::string(af::CausalName(tr.causal));
  d["scale"] = tr.scale;
  nb::list toks;
  for (const auto& t : tr.tokens) toks.append(nb::make_tuple(t.id, t.text));
  d["tokens"] = toks;
  nb::dict stages;
  for (const auto& st : tr.stages) stages[st.name.c_str()] = CopyToNumpy(st.value.view());
  d["stages"] = stages;
  nb::list steps;
  for (const auto& step : tr.decode) {
    nb::dict sd;
    sd["token"] = nb::make_tuple(step.token.id, step.token.text);
    sd["position"] = step.position;
    nb::dict ss;
    for (const auto& st : step.stages) ss[st.name.c_str()] = CopyToNumpy(st.value.view());
    sd["stages"] = ss;
    steps.append(sd);
  }
  d["decode"] = steps;
  // Key padding (semantics.h: right padding, keys j >= kv_len masked): None
  // when the trace has none.
  if (tr.pad_keys.empty()) {
    d["padding"] = nb::none();
  } else {
    nb::dict pd;
    pd["keys"] = tr.pad_keys;
    pd["kv_len"] = tr.pad_kv_len;
    d["padding"] = pd;
  }
  if (!tr.batch_sentences.empty()) d["batch_index"] = tr.batch_index;
  nb::dict kc;
  kc["ran"] = tr.kernel.ran;
  kc["kernel"] = tr.kernel.kernel;
  kc["max_abs_out"] = tr.kernel.max_abs_out;
  kc["max_abs_lse"] = tr.kernel.max_abs_lse;
  kc["max_abs_weights"] = tr.kernel.max_abs_weights;
  kc["note"] = tr.kernel.note;
  d["kernel_check"] = kc;
  return d;
}

// attnflow.trace: the toy (model None; pad keys and the causal rule), one
// encoder sentence, an encoder batch (sentences: one padded forward pass,
// one trace per sentence) or a decoder prompt. Checks here only what the
// library does not: which options go with which model.
nb::dict RunTrace(nb::handle model, const std::string& text, int64_t layer,
                  int64_t decode_steps, int64_t num_tokens, int64_t max_tokens,
                  const std::vector<int64_t>& heads, const std::string& html_path, int64_t pad,
                  const std::string& causal, const std::vector<std::string>& sentences) {
  Encoder* enc = nullptr;
  Decoder* dec = nullptr;
  if (!model.is_none()) {
    if (!nb::try_cast(model, enc) && !nb::try_cast(model, dec)) {
      RaiseType("attnflow.trace: model must be None (the toy), a MiniLM or a SmolLM2");
    }
  }
  af::Causal toy_causal = af::Causal::kTopLeft;
  if (!causal.empty()) {
    if (!model.is_none()) {
      RaiseValue("attnflow.trace: causal sets the toy's mask; a model has its own (got causal='" +
                 causal + "' with a model)");
    }
    if (!af::ParseCausal(causal, &toy_causal)) {
      RaiseValue("attnflow.trace: causal must be 'none', 'top_left' or 'bottom_right', got '" +
                 causal + "'");
    }
  }
  if (pad != 0 && !model.is_none()) {
    RaiseValue("attnflow.trace: pad appends <pad> keys to the toy only; a model pads a batch "
               "itself: pass sentences=[...] with a MiniLM");
  }
  if (!sentences.empty()) {
    if (enc == nullptr) {
      RaiseValue("attnflow.trace: sentences runs a padded batch through an encoder: pass an "
                 "attnflow.MiniLM as model");
    }
    if (!text.empty()) {
      RaiseValue("attnflow.trace: pass either text (one sentence) or sentences (a batch), not both");
    }
  }
  af::trace::ModelTraceOptions mo;
  mo.layer = layer;
  mo.decode_steps = decode_steps;
  af::player::PageOptions po;
  po.max_tokens = max_tokens;
  po.heads = heads;
  af::Result<std::vector<af::trace::Trace>> traces = af::Status();
  af::Result<std::string> json = af::Status();
  af::Result<std::string> html = af::Status();
  {
    nb::gil_scoped_release release;
    if (!sentences.empty()) {
      traces = af::trace::TraceEncoderBatch(*enc->m, sentences, mo);
      if (traces.ok()) json = af::player::BatchToJson(*traces, po);
    } else {
      af::Result<af::trace::Trace> tr = af::Status();
      if (enc != nullptr) {
        tr = af::trace::TraceEncoder(*enc->m, text, mo);
      } else if (dec != nullptr) {
        tr = af::trace::TraceDecoder(*dec->m, text, mo);
      } else {
        af::trace::ToyOptions to;
        to.num_tokens = num_tokens;
        to.decode_steps = decode_steps;
        to.pad = pad;
        to.causal = toy_causal;
        tr = af::trace::TraceToy(to);
      }
      if (tr.ok()) {
        traces = std::vector<af::trace::Trace>();
        traces->push_back(std::move(tr).value());
        json = af::player::TraceToJson(traces->front(), po);
      } else {
        traces = tr.status();
      }
    }
    if (json.ok() && !html_path.empty()) {
      html = af::player::RenderPlayerHtml(*json);
      if (html.ok()) {
        af::Status st = af::WriteFileAtomic(html_path, *html);
        if (!st.ok()) html = st;
      }
    }
  }
  Check(traces.status());
  Check(json.status());
  if (!html_path.empty()) Check(html.status());
  nb::dict d;
  if (sentences.empty()) {
    d = TraceDict(traces->front());
  } else {
    d["source"] = traces->front().source;
    d["model"] = traces->front().info.name;
    d["layer"] = traces->front().layer;
    d["sentences"] = sentences;
    nb::list batch;
    for (const auto& t : *traces) batch.append(TraceDict(t));
    d["batch"] = batch;
  }
  d["page_json"] = *json;
  return d;
}

}  // namespace

NB_MODULE(_attnflow, m) {
  m.doc() = "attnflow compiled core (see the attnflow package for the public API)";
  nb::dict causal_codes, kernel_codes, align_codes;
  for (af::Causal c : kCausals) causal_codes[af::CausalName(c)] = static_cast<int>(c);
  for (af::KernelKind k : kKernels) kernel_codes[af::KernelKindName(k)] = static_cast<int>(k);
  for (af::KvAlign a : kKvAligns) align_codes[af::KvAlignName(a)] = static_cast<int>(a);
  m.attr("CAUSAL") = causal_codes;
  m.attr("KERNELS") = kernel_codes;
  m.attr("KV_ALIGN") = align_codes;

  m.def("sdpa", &Sdpa, "out"_a, "lse"_a.none(), "query"_a, "key"_a, "value"_a,
        "attn_mask"_a.none(), "kv_lens"_a.none(), "alibi_slopes"_a.none(), "causal"_a,
        "scale"_a, "window_left"_a, "window_right"_a, "kernel"_a, "softcap"_a = 0.0,
        "kv_align"_a = 0);
  m.def("sdpa_backward", &SdpaBackward, "dq"_a.none(), "dk"_a.none(), "dv"_a.none(), "dout"_a,
        "dlse"_a.none(), "query"_a, "key"_a, "value"_a, "out"_a.none(), "lse"_a.none(),
        "attn_mask"_a.none(), "kv_lens"_a.none(), "alibi_slopes"_a.none(), "causal"_a,
        "scale"_a, "window_left"_a, "window_right"_a, "softcap"_a, "kv_align"_a, "kernel"_a);
  m.def("sdpa_varlen", &SdpaVarlen, "out"_a, "lse"_a.none(), "q"_a, "k"_a, "v"_a,
        "cu_seqlens_q"_a, "cu_seqlens_k"_a, "alibi_slopes"_a.none(), "causal"_a, "scale"_a,
        "window_left"_a, "window_right"_a, "softcap"_a);
  m.def("sdpa_varlen_backward", &SdpaVarlenBackward, "dq"_a.none(), "dk"_a.none(),
        "dv"_a.none(), "dout"_a, "dlse"_a.none(), "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a,
        "cu_seqlens_q"_a, "cu_seqlens_k"_a, "alibi_slopes"_a.none(), "causal"_a, "scale"_a,
        "window_left"_a, "window_right"_a, "softcap"_a);
  m.def("sdpa_paged", &SdpaPaged, "out"_a, "lse"_a.none(), "q"_a, "k_cache"_a, "v_cache"_a,
        "block_table"_a, "cache_seqlens"_a, "alibi_slopes"_a.none(), "causal"_a, "scale"_a,
        "window_left"_a, "window_right"_a, "softcap"_a);
  m.def("set_num_threads", &SetNumThreads, "n"_a);
  m.def("get_num_threads", &GetNumThreads);
  m.def("explain", &Explain, "out"_a.none(), "lse"_a.none(), "query"_a, "key"_a, "value"_a,
        "attn_mask"_a.none(), "kv_lens"_a.none(), "alibi_slopes"_a.none(), "causal"_a,
        "scale"_a, "window_left"_a, "window_right"_a, "kernel"_a = 0, "softcap"_a = 0.0,
        "kv_align"_a = 0);
  m.def("reference_sdpa", &ReferenceSdpa, "query"_a, "key"_a, "value"_a, "attn_mask"_a.none(),
        "kv_lens"_a.none(), "alibi_slopes"_a.none(), "causal"_a, "scale"_a, "window_left"_a,
        "window_right"_a, "stages"_a, "softcap"_a = 0.0, "kv_align"_a = 0);
  m.def("merge", &Merge, "out"_a, "lse"_a, "out_a"_a, "lse_a"_a, "out_b"_a, "lse_b"_a);
  m.def("golden_verify", &GoldenVerify, "path"_a, "impl"_a);
  // Whether the opt-in fast dot runs SIMD code here (AVX-512 VNNI or AVX2);
  // false: its scalar reference (attnflow.SmolLM2(fast_dot=True) warns).
  m.def("fast_dot_has_simd", [] { return af::ops::QFastDotHasSimd(); });
  m.def("golden_write", &GoldenWrite, "path"_a, "kind"_a, "batch"_a, "num_heads"_a,
        "num_kv_heads"_a, "q_len"_a, "kv_len"_a, "head_dim"_a, "v_dim"_a, "causal"_a,
        "scale"_a, "mask"_a, "mask_shape"_a, "kv_lens"_a, "window_left"_a, "window_right"_a,
        "alibi"_a, "seed"_a, "description"_a);
  m.def("trace", &RunTrace, "model"_a.none(), "text"_a, "layer"_a, "decode_steps"_a,
        "num_tokens"_a, "max_tokens"_a, "heads"_a, "html_path"_a, "pad"_a, "causal"_a,
        "sentences"_a);
  m.def("find_minilm_dir", [](const std::string& fallback_venv) {
    af::Result<std::string> r = af::FindMiniLmPackageDir(fallback_venv);
    Check(r.status());
    return *r;
  });

  nb::class_<Encoder>(m, "Encoder")
      .def_static("load", &LoadEncoder, "dir"_a, nb::rv_policy::take_ownership)
      .def_prop_ro("info", [](const Encoder& e) { return InfoDict(e.m->info()); })
      .def_prop_ro("max_seq_length", [](const Encoder& e) { return e.m->MaxSequenceLength(); })
      .def("encode_text", [](const Encoder& e, const std::string& text) {
        af::Result<std::vector<int32_t>> r = e.m->EncodeText(text);
        Check(r.status());
        return *r;
      })
      .def("embed_texts", [](Encoder& e, const std::vector<std::string>& texts,
                             int64_t batch_size) {
        af::Tensor emb;
        const af::Status st = Locked(e, [&] { return e.m->EmbedTexts(texts, batch_size, &emb); });
        Check(st);
        return ToNumpy(std::move(emb));
      })
      .def("embed_ids", [](Encoder& e, const std::vector<std::vector<int32_t>>& ids) {
        af::Tensor emb, hidden;
        const af::Status st = Locked(e, [&] { return e.m->Embed(ids, &emb, &hidden); });
        Check(st);
        return nb::make_tuple(ToNumpy(std::move(emb)), ToNumpy(std::move(hidden)));
      });

  nb::class_<Decoder>(m, "Decoder")
      .def_static("load", &LoadDecoder, "path"_a, "kv_dtype"_a, "threads"_a, "max_context"_a,
                  "fast_dot"_a,
                  nb::rv_policy::take_ownership)
      .def_prop_ro("info", [](const Decoder& d) { return InfoDict(d.m->info()); })
      .def_prop_ro("cache_length",
                   [](Decoder& d) { return Locked(d, [&] { return d.m->CacheLength(); }); })
      .def_prop_ro("eos_id", [](const Decoder& d) { return d.m->tokenizer().EosId(); })
      .def("reset", [](Decoder& d) { Locked(d, [&] { d.m->Reset(); }); })
      .def("encode", [](const Decoder& d, const std::string& text, bool add_special) {
        af::Result<std::vector<int32_t>> r = d.m->tokenizer().Encode(text, add_special);
        Check(r.status());
        return *r;
      })
      .def("decode", [](const Decoder& d, const std::vector<int32_t>& ids, bool skip_special) {
        af::Result<std::string> r = d.m->tokenizer().Decode(ids, skip_special);
        Check(r.status());
        return *r;
      })
      .def("token_bytes", [](const Decoder& d, int32_t id) {
        std::string s = d.m->tokenizer().TokenBytes(id);
        return nb::bytes(s.data(), s.size());
      })
      .def("apply_chat_template",
           [](const Decoder& d, const std::vector<std::pair<std::string, std::string>>& msgs,
              bool add_generation_prompt) {
             af::Result<std::string> r = d.m->ApplyChatTemplate(msgs, add_generation_prompt);
             Check(r.status());
             return *r;
           })
      .def("forward", [](Decoder& d, const std::vector<int32_t>& ids, bool all_logits) {
        af::Tensor logits;
        const af::Status st =
            Locked(d, [&] { return d.m->Forward(ids, all_logits, &logits); });
        Check(st);
        return ToNumpy(std::move(logits));
      });

  nb::class_<af::Sampler>(m, "Sampler")
      .def("__init__",
           [](af::Sampler* self, double temperature, int64_t top_k, double top_p, uint64_t seed) {
             af::SamplingOptions o{temperature, top_k, top_p, seed};
             Check(af::Sampler::Validate(o));
             new (self) af::Sampler(o);
           },
           "temperature"_a, "top_k"_a, "top_p"_a, "seed"_a)
      .def("sample", [](af::Sampler& s, nb::ndarray<const float, nb::ndim<1>, nb::c_contig,
                                                    nb::device::cpu> logits) {
        af::Result<int32_t> r = s.Sample(logits.data(), static_cast<int64_t>(logits.shape(0)));
        Check(r.status());
        return *r;
      });
}
