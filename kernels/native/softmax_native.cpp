// Native allocate-and-launch for softmax plans (kernels/native/__init__.py builds and loads it).
//
// From Python, torch.empty_like costs more than the whole of a small kernel's launch: its argument
// parser alone is a few microseconds. A plan whose launches are all recorded cuLaunchKernel calls
// (kernels/cuda/replay.py: 8-byte argument slots, x and out pointers patched per call) hands them
// here once (make_plan) and then runs each call as one C call: allocate the output with
// at::empty_like, patch the two pointers into a copy of the recorded slots, launch on the given
// stream. Nothing here owns CUDA state: function handles and the stream come from the caller, and
// libcuda is the one the process has loaded already.
#define PY_SSIZE_T_CLEAN  // "y#" sizes are Py_ssize_t (required from Python 3.12)
#include <Python.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

using LaunchKernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             void*, void**, void**);
using FuncGetParamInfo = int (*)(void*, std::size_t, std::size_t*, std::size_t*);
using DeviceGet = int (*)(int*, int);
using PrimaryCtxRetain = int (*)(void**, int);
using CtxSetCurrent = int (*)(void*);
LaunchKernel launch_kernel = nullptr;
FuncGetParamInfo func_get_param_info = nullptr;  // CUDA 12.4+ drivers; null on older ones
DeviceGet device_get = nullptr;
PrimaryCtxRetain primary_ctx_retain = nullptr;
CtxSetCurrent ctx_set_current = nullptr;

constexpr int kInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT: this thread has no current context

// Make the device's primary context (the one torch and CuPy use) current on this thread. A thread
// that has only reused cached allocations has never touched the driver, so its first launch finds
// no context; the Python launch layer does the same on a thread's first launch.
bool make_primary_context_current(int ordinal) {
  void* context = nullptr;
  int device = 0;
  return device_get && primary_ctx_retain && ctx_set_current && device_get(&device, ordinal) == 0 &&
         primary_ctx_retain(&context, device) == 0 && ctx_set_current(context) == 0;
}

constexpr std::size_t kMaxSlots = 64;  // kernel parameters per launch: ours take at most 12

struct Launch {
  void* function;
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_mem;
  std::vector<uint64_t> slots;  // the recorded arguments, one 8-byte slot each
  std::vector<int> x_slots;     // slots that take the input pointer
  std::vector<int> out_slots;   // slots that take the output pointer
};

struct Plan {
  std::vector<Launch> launches;
};

const char* kCapsule = "softmax_native.plan";

void free_plan(PyObject* capsule) {
  delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kCapsule));
}

bool resolve_driver() {
  if (launch_kernel) return true;
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!lib) {
    PyErr_SetString(PyExc_RuntimeError, "libcuda.so.1 cannot be loaded: no CUDA driver in this process");
    return false;
  }
  launch_kernel = reinterpret_cast<LaunchKernel>(dlsym(lib, "cuLaunchKernel"));
  if (!launch_kernel) {
    PyErr_SetString(PyExc_RuntimeError, "libcuda.so.1 has no cuLaunchKernel");
    return false;
  }
  func_get_param_info = reinterpret_cast<FuncGetParamInfo>(dlsym(lib, "cuFuncGetParamInfo"));
  device_get = reinterpret_cast<DeviceGet>(dlsym(lib, "cuDeviceGet"));
  primary_ctx_retain = reinterpret_cast<PrimaryCtxRetain>(dlsym(lib, "cuDevicePrimaryCtxRetain"));
  ctx_set_current = reinterpret_cast<CtxSetCurrent>(dlsym(lib, "cuCtxSetCurrent"));
  return true;
}

bool read_triple(PyObject* seq, unsigned out[3], const char* what) {
  if (!PyArg_ParseTuple(seq, "III", &out[0], &out[1], &out[2])) {
    PyErr_Format(PyExc_ValueError, "%s must be a tuple of three unsigned ints", what);
    return false;
  }
  return true;
}

bool read_slot_list(PyObject* seq, std::size_t n_slots, std::vector<int>& out, const char* what) {
  PyObject* fast = PySequence_Fast(seq, what);
  if (!fast) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) { Py_DECREF(fast); return false; }
    if (v < 0 || static_cast<std::size_t>(v) >= n_slots) {
      Py_DECREF(fast);
      PyErr_Format(PyExc_ValueError, "%s: slot %ld outside the %zu argument slots", what, v, n_slots);
      return false;
    }
    out.push_back(static_cast<int>(v));
  }
  Py_DECREF(fast);
  return true;
}

// make_plan(launches) -> capsule. Each launch: (function: int, grid: (3 ints), block: (3 ints),
// shared_mem: int, slots: bytes (8 per argument), x_slots: tuple of int, out_slots: tuple of int).
PyObject* make_plan(PyObject*, PyObject* launches) {
  PyObject* fast = PySequence_Fast(launches, "make_plan expects a sequence of launches");
  if (!fast) return nullptr;
  auto plan = new Plan();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  bool ok = n > 0;
  if (!ok) PyErr_SetString(PyExc_ValueError, "make_plan needs at least one launch");
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    PyObject *grid, *block, *x_slots, *out_slots;
    unsigned long long function;
    unsigned shared_mem;
    const char* slots;
    Py_ssize_t slots_len;
    Launch launch;
    ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "KOOIy#OO", &function, &grid, &block, &shared_mem,
                          &slots, &slots_len, &x_slots, &out_slots);
    if (ok && (slots_len % 8 || static_cast<std::size_t>(slots_len / 8) > kMaxSlots || function == 0)) {
      PyErr_Format(PyExc_ValueError, "launch %zd: need a function handle and 8-byte slots (at most %zu)", i, kMaxSlots);
      ok = false;
    }
    ok = ok && read_triple(grid, launch.grid, "grid") && read_triple(block, launch.block, "block");
    if (ok) {
      launch.function = reinterpret_cast<void*>(static_cast<uintptr_t>(function));
      launch.shared_mem = shared_mem;
      launch.slots.resize(slots_len / 8);
      std::memcpy(launch.slots.data(), slots, slots_len);
      ok = read_slot_list(x_slots, launch.slots.size(), launch.x_slots, "x_slots") &&
           read_slot_list(out_slots, launch.slots.size(), launch.out_slots, "out_slots");
    }
    if (ok) plan->launches.push_back(std::move(launch));
  }
  Py_DECREF(fast);
  if (!ok || !resolve_driver()) { delete plan; return nullptr; }  // the launches are read before the driver
  PyObject* capsule = PyCapsule_New(plan, kCapsule, free_plan);
  if (!capsule) delete plan;
  return capsule;
}

// run(x, stream, plan) -> out, or None where x's data pointer is not 16-byte aligned (the caller
// then takes its own path). x must be a contiguous CUDA tensor on the current device, the plan's
// shape and dtype (the caller's contract: plans are kept per device, shape and dtype).
PyObject* run(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "run(x: Tensor, stream: int, plan)");
    return nullptr;
  }
  if (!PyCapsule_IsValid(args[2], kCapsule)) {
    PyErr_SetString(PyExc_TypeError, "run: plan must come from make_plan");
    return nullptr;
  }
  auto plan = static_cast<Plan*>(PyCapsule_GetPointer(args[2], kCapsule));
  void* stream = PyLong_AsVoidPtr(args[1]);
  if (!stream && PyErr_Occurred()) return nullptr;
  try {
    const at::Tensor& x = THPVariable_Unpack(args[0]);
    auto xp = reinterpret_cast<uint64_t>(x.data_ptr());
    if (xp & 15) Py_RETURN_NONE;
    at::Tensor out = at::empty_like(x);
    auto op = reinterpret_cast<uint64_t>(out.data_ptr());
    if (op & 15) Py_RETURN_NONE;
    uint64_t values[kMaxSlots];
    void* params[kMaxSlots];
    for (const Launch& l : plan->launches) {
      std::size_t n = l.slots.size();
      std::memcpy(values, l.slots.data(), n * 8);
      for (int s : l.x_slots) values[s] = xp;
      for (int s : l.out_slots) values[s] = op;
      for (std::size_t i = 0; i < n; ++i) params[i] = &values[i];
      int status = launch_kernel(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                                 l.shared_mem, stream, params, nullptr);
      if (status == kInvalidContext && make_primary_context_current(x.get_device())) {
        status = launch_kernel(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                               l.shared_mem, stream, params, nullptr);
      }
      if (status != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed: CUresult %d", status);
        return nullptr;
      }
    }
    return THPVariable_Wrap(std::move(out));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// param_sizes(function) -> tuple of each kernel parameter's size in bytes, as the driver reports it
// (cuFuncGetParamInfo), or None where the driver cannot tell (before CUDA 12.4). A caller that
// derives a launch's arguments from anything but the kernel's own source checks them against this
// before the first launch: a wrong layout would pass a value where a pointer is read.
PyObject* param_sizes(PyObject*, PyObject* handle) {
  if (!resolve_driver()) return nullptr;
  void* function = PyLong_AsVoidPtr(handle);
  if (!function) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "param_sizes needs a function handle");
    return nullptr;
  }
  if (!func_get_param_info) Py_RETURN_NONE;
  PyObject* sizes = PyList_New(0);
  if (!sizes) return nullptr;
  for (std::size_t i = 0; i < 1024; ++i) {
    std::size_t offset = 0, size = 0;
    if (func_get_param_info(function, i, &offset, &size) != 0) break;  // past the last parameter
    PyObject* value = PyLong_FromSize_t(size);
    if (!value || PyList_Append(sizes, value) < 0) { Py_XDECREF(value); Py_DECREF(sizes); return nullptr; }
    Py_DECREF(value);
  }
  PyObject* result = PyList_AsTuple(sizes);
  Py_DECREF(sizes);
  return result;
}

// empty_like(x) -> at::empty_like(x), without torch's Python argument parser.
PyObject* empty_like(PyObject*, PyObject* x) {
  if (!THPVariable_Check(x)) {
    PyErr_SetString(PyExc_TypeError, "empty_like expects a Tensor");
    return nullptr;
  }
  try {
    return THPVariable_Wrap(at::empty_like(THPVariable_Unpack(x)));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef methods[] = {
    {"make_plan", make_plan, METH_O, "make_plan(launches) -> plan capsule"},
    {"run", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run)), METH_FASTCALL,
     "run(x, stream, plan) -> out or None"},
    {"empty_like", empty_like, METH_O, "empty_like(x) -> Tensor"},
    {"param_sizes", param_sizes, METH_O, "param_sizes(function) -> tuple of sizes, or None"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_softmax_native", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__softmax_native() { return PyModule_Create(&module); }
