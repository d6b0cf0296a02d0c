/* A loaded function's CUDA kernel as a torch operator's boxed C++ kernel (schedc.torch.custom_op
 * registers it where the function is one kernel whose parameters are the caller's arrays;
 * schedc.package.native builds this file against the installed torch, once per machine and torch).
 *
 * The dispatcher calls it with the operator's arguments on its stack and no Python in between:
 * it makes fastlaunch.c's checks on each tensor -- dtype, shape, device, strides, alignment, a null
 * pointer, the overlap of a written array --, allocates the returned outputs on the arguments'
 * device, and launches on torch's current stream with a parameter buffer of its own (threads may
 * call at once: the dispatcher does not hold the GIL). A kernel's by-value structs (TMA tensor
 * maps) are encoded by Python for the call's addresses and kept: encoded again only when the
 * addresses change. Where a check fails it calls the function
 * from Python with the same arguments (the general path: it explains what is wrong with schedc's
 * message, or takes a call this one does not), and a launch that fails is reported by Python too. */
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAStream.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int kMaxArrays = 32;
constexpr int kMaxValues = 16;

struct alignas(64) Value {  // a by-value kernel parameter (a CUtensorMap is 128 bytes, 64-aligned)
  unsigned char bytes[128];
};

using LaunchFn = int (*)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shared, void *stream, void **params, void **extra);
using SetContextFn = int (*)(void *context);

struct Array {
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // every dimension's, in elements
  std::vector<bool> fixed;       // the dimensions longer than 1: only their strides are fixed
  bool row_major = false;        // is_contiguous() says the strides are right
  bool returned = false;         // allocated here and returned (a functional operator's output)
  uint64_t nbytes = 0;
  uint64_t alignment = 1;
};

struct Launch {
  LaunchFn launch = nullptr;
  SetContextFn set_context = nullptr;
  void *context = nullptr;
  void *function = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, shared = 0;
};

// the Python error of E carried by the exception thrown (held in it, not only in this thread's
// state: a thread the dispatcher runs on may have no Python thread state of its own)
[[noreturn]] void rethrow(py::error_already_set &e) {
  e.restore();
  python_error error;
  error.persist();
  throw error;
}

c10::ScalarType dtype_of(const py::handle &object) {
  if (!THPDtype_Check(object.ptr()))
    throw py::type_error("schedc operator: a torch dtype expected");
  return reinterpret_cast<THPDtype *>(object.ptr())->scalar_type;
}

std::vector<int64_t> ints_of(const py::handle &sequence) {
  std::vector<int64_t> values;
  for (const auto &item : sequence)
    values.push_back(item.cast<int64_t>());
  return values;
}

class Kernel : public c10::OperatorKernel {
 public:
  Kernel(std::vector<Array> arrays, std::vector<std::pair<int, int>> pairs, int64_t ordinal, size_t values,
         py::object prepare, py::object encode, py::object general, py::object failed)
      : arrays_(std::move(arrays)), pairs_(std::move(pairs)), ordinal_(ordinal), values_(values),
        prepare_(std::move(prepare)), encode_(std::move(encode)), general_(std::move(general)),
        failed_(std::move(failed)) {
    for (const auto &a : arrays_)
      given_ += a.returned ? 0 : 1;
  }

  ~Kernel() override {  // the Python callables die with the interpreter's GIL held, or not at all
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      prepare_ = py::object();
      encode_ = py::object();
      general_ = py::object();
      failed_ = py::object();
    } else {
      prepare_.release();
      encode_.release();
      general_.release();
      failed_.release();
    }
  }

  void operator()(const c10::OperatorHandle &, c10::DispatchKeySet, torch::jit::Stack *stack) {
    const size_t count = arrays_.size();
    std::array<at::Tensor, kMaxArrays> tensors;
    auto args = torch::jit::last(*stack, given_);
    size_t next = 0;
    bool fits = true;
    std::optional<c10::Device> first;  // the first tensor argument's device
    for (size_t n = 0; n < count; n++) {
      const Array &a = arrays_[n];
      if (a.returned)
        continue;
      const c10::IValue &value = args[next++];
      if (!value.isTensor()) {
        fits = false;
        continue;
      }
      tensors[n] = value.toTensor();
      if (!first && tensors[n].defined())
        first = tensors[n].device();
      fits = fits && this->fits(tensors[n], a);
    }
    // the outputs: on the function's device where every check passed, else where the Python
    // operator makes them (the first tensor argument's device), for the function's own call
    const c10::Device device = fits || !first ? c10::Device(c10::DeviceType::CUDA, ordinal_) : *first;
    for (size_t n = 0; n < count; n++) {
      const Array &a = arrays_[n];
      if (a.returned)
        tensors[n] = at::empty_strided(a.shape, a.strides, at::TensorOptions().dtype(a.dtype).device(device));
    }
    std::array<uint64_t, kMaxArrays> pointers{};
    for (size_t n = 0; n < count && fits; n++)
      pointers[n] = reinterpret_cast<uint64_t>(tensors[n].data_ptr());
    for (const auto &[a, b] : pairs_) {
      if (fits && pointers[a] < pointers[b] + arrays_[b].nbytes && pointers[b] < pointers[a] + arrays_[a].nbytes)
        fits = false;
    }
    if (!fits) {
      general(tensors, args);
    } else {
      launch(pointers);
    }
    torch::jit::drop(*stack, given_);
    for (size_t n = 0; n < count; n++) {
      if (arrays_[n].returned)
        stack->emplace_back(std::move(tensors[n]));
    }
  }

 private:
  bool fits(const at::Tensor &t, const Array &a) const {
    if (!t.defined() || t.scalar_type() != a.dtype || t.sizes() != c10::IntArrayRef(a.shape) || !t.is_cuda()
        || t.get_device() != ordinal_)
      return false;
    if (!(a.row_major && t.is_contiguous())) {
      const auto strides = t.strides();
      if (strides != c10::IntArrayRef(a.strides)) {
        for (size_t d = 0; d < a.strides.size(); d++) {
          if (a.fixed[d] && strides[d] != a.strides[d])
            return false;
        }
      }
    }
    const auto pointer = reinterpret_cast<uint64_t>(t.data_ptr());
    return pointer % a.alignment == 0 && (pointer || !a.nbytes);
  }

  // the launch's handles, asked of Python at the first launch (the GIL serializes the asking;
  // no lock of this kernel is held while it is taken)
  const Launch &prepared() {
    if (ready_.load(std::memory_order_acquire))
      return launch_;
    py::gil_scoped_acquire gil;
    if (!ready_.load(std::memory_order_relaxed)) {
      try {
        py::tuple t = prepare_();
        launch_.launch = reinterpret_cast<LaunchFn>(t[0].cast<uintptr_t>());
        launch_.set_context = reinterpret_cast<SetContextFn>(t[1].cast<uintptr_t>());
        launch_.context = reinterpret_cast<void *>(t[2].cast<uintptr_t>());
        launch_.function = reinterpret_cast<void *>(t[3].cast<uintptr_t>());
        for (int d = 0; d < 3; d++) {
          launch_.grid[d] = t[4].cast<py::tuple>()[d].cast<unsigned>();
          launch_.block[d] = t[5].cast<py::tuple>()[d].cast<unsigned>();
        }
        launch_.shared = t[6].cast<unsigned>();
      } catch (py::error_already_set &e) {
        rethrow(e);
      }
      ready_.store(true, std::memory_order_release);
    }
    return launch_;
  }

  // the by-value structs for these addresses: the kept ones where the addresses are the same,
  // else encoded by Python (no lock is held while the GIL is taken: a thread holding the GIL
  // may be waiting for the lock)
  void values_for(const std::array<uint64_t, kMaxArrays> &pointers, std::array<Value, kMaxValues> &out) {
    const size_t count = arrays_.size();
    {
      std::lock_guard<std::mutex> lock(values_mutex_);
      if (values_kept_ && std::equal(pointers.begin(), pointers.begin() + count, kept_for_.begin())) {
        std::copy(kept_.begin(), kept_.begin() + values_, out.begin());
        return;
      }
    }
    {
      py::gil_scoped_acquire gil;
      try {
        py::tuple addresses(count);
        for (size_t n = 0; n < count; n++)
          addresses[n] = py::int_(pointers[n]);
        py::list encoded = encode_(*addresses);
        if (encoded.size() != values_)
          throw py::value_error("schedc operator: the structs encoded are not the kernel's");
        for (size_t v = 0; v < values_; v++) {
          std::string bytes = encoded[v].cast<py::bytes>();
          if (bytes.size() > sizeof(Value::bytes))
            throw py::value_error("schedc operator: a by-value struct past 128 bytes");
          std::memset(out[v].bytes, 0, sizeof(Value::bytes));
          std::memcpy(out[v].bytes, bytes.data(), bytes.size());
        }
      } catch (py::error_already_set &e) {
        rethrow(e);
      }
    }
    std::lock_guard<std::mutex> lock(values_mutex_);
    std::copy(out.begin(), out.begin() + values_, kept_.begin());
    std::copy(pointers.begin(), pointers.begin() + count, kept_for_.begin());
    values_kept_ = true;
  }

  void launch(std::array<uint64_t, kMaxArrays> &pointers) {
    const Launch &l = prepared();
    std::array<void *, kMaxArrays + kMaxValues> params{};
    std::array<Value, kMaxValues> values;
    for (size_t n = 0; n < arrays_.size(); n++)
      params[n] = &pointers[n];
    if (values_) {
      values_for(pointers, values);
      for (size_t v = 0; v < values_; v++)
        params[arrays_.size() + v] = values[v].bytes;
    }
    void *stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(ordinal_)).stream();
    int result = l.launch(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared,
                          stream, params.data(), nullptr);
    if (result) {  // no context, or another one, current on this thread: the function's, then again
      l.set_context(l.context);
      result = l.launch(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared,
                        stream, params.data(), nullptr);
    }
    if (result) {
      py::gil_scoped_acquire gil;
      try {
        failed_(result, reinterpret_cast<uintptr_t>(stream));
      } catch (py::error_already_set &e) {
        rethrow(e);
      }
    }
  }

  // the function called from Python with the call's arguments (and the outputs made here)
  void general(std::array<at::Tensor, kMaxArrays> &tensors, c10::ArrayRef<c10::IValue> args) {
    py::gil_scoped_acquire gil;
    try {
      py::tuple call(arrays_.size());
      size_t next = 0;
      for (size_t n = 0; n < arrays_.size(); n++) {
        if (!arrays_[n].returned && !args[next].isTensor()) {
          call[n] = py::none();  // the schema admits tensors only; an undefined one is None
        } else {
          PyObject *wrapped = THPVariable_Wrap(tensors[n]);
          if (!wrapped)
            throw py::error_already_set();
          call[n] = py::reinterpret_steal<py::object>(wrapped);
        }
        next += arrays_[n].returned ? 0 : 1;
      }
      general_(*call);
    } catch (py::error_already_set &e) {
      rethrow(e);
    }
  }

  std::vector<Array> arrays_;
  std::vector<std::pair<int, int>> pairs_;
  int64_t ordinal_;
  size_t values_;
  size_t given_ = 0;
  py::object prepare_, encode_, general_, failed_;
  std::atomic<bool> ready_{false};
  Launch launch_;
  std::mutex values_mutex_;
  bool values_kept_ = false;
  std::array<uint64_t, kMaxArrays> kept_for_{};
  std::array<Value, kMaxValues> kept_;
};

std::vector<std::unique_ptr<torch::Library>> &libraries() {
  static auto *kept = new std::vector<std::unique_ptr<torch::Library>>();  // alive as long as the process
  return *kept;
}

/* register_kernel(namespace, op, arrays, pairs, ordinal, values, prepare, encode, general, failed):
 * arrays in the function's parameter order (the kernel's pointer parameters), each (dtype, shape,
 * strides, fixed, row_major, returned, nbytes, alignment); values: the kernel's by-value structs
 * after them; prepare() -> (cuLaunchKernel's address, cuCtxSetCurrent's, context, function, grid,
 * block, shared bytes); encode(*addresses) -> the structs' bytes for the arrays at those addresses;
 * general(*arrays) the function's own call; failed(result, stream) raises. */
void register_kernel(const std::string &ns, const std::string &op, const py::list &arrays, const py::list &pairs,
                     int64_t ordinal, size_t values, py::object prepare, py::object encode, py::object general,
                     py::object failed) {
  if (arrays.size() > static_cast<size_t>(kMaxArrays) || values > static_cast<size_t>(kMaxValues))
    throw py::value_error("schedc operator: at most 32 arrays and 16 by-value structs");
  std::vector<Array> specs;
  for (const auto &item : arrays) {
    py::tuple t = item.cast<py::tuple>();
    Array a;
    a.dtype = dtype_of(t[0]);
    a.shape = ints_of(t[1]);
    a.strides = ints_of(t[2]);
    for (const auto &flag : t[3])
      a.fixed.push_back(flag.cast<bool>());
    a.row_major = t[4].cast<bool>();
    a.returned = t[5].cast<bool>();
    a.nbytes = t[6].cast<uint64_t>();
    a.alignment = std::max<uint64_t>(t[7].cast<uint64_t>(), 1);
    if (a.strides.size() != a.shape.size() || a.fixed.size() != a.shape.size())
      throw py::value_error("schedc operator: an array's shape, strides and fixed differ in length");
    specs.push_back(std::move(a));
  }
  std::vector<std::pair<int, int>> checked;
  for (const auto &item : pairs) {
    py::tuple t = item.cast<py::tuple>();
    const int a = t[0].cast<int>(), b = t[1].cast<int>();
    if (a < 0 || b < 0 || a >= static_cast<int>(specs.size()) || b >= static_cast<int>(specs.size()))
      throw py::value_error("schedc operator: a pair names an array past the arrays");
    checked.emplace_back(a, b);
  }
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::CUDA, __FILE__,
                                                  __LINE__);
  library->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(
                                std::move(specs), std::move(checked), ordinal, values, std::move(prepare),
                                std::move(encode), std::move(general), std::move(failed))));
  libraries().push_back(std::move(library));
}

}  // namespace

PYBIND11_MODULE(_schedc_torchop, m) {
  m.doc() = "A loaded schedc function's CUDA kernel as a torch operator's boxed C++ kernel";
  m.def("register_kernel", &register_kernel);
}
