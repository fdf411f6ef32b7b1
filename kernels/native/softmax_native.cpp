// Native allocate-and-launch for softmax launches (kernels/native/__init__.py builds and loads it).
//
// From Python, torch.empty_like costs more than the whole of a small kernel's launch: its argument
// parser alone is a few microseconds. A kernel instance describes an (M, N) call's launch as plain
// values (Build.native: function handle, grid, block, shared memory, 8-byte argument slots with the
// x and out slots), and run issues it as one C call with no object made per shape: allocate the
// output with at::empty_like, patch the two pointers into a copy of the slots, launch on the given
// stream. Nothing here owns CUDA state: function handles and the stream come from the caller, and
// libcuda is the one the process has loaded already.
#define PY_SSIZE_T_CLEAN  // "y#" sizes are Py_ssize_t (required from Python 3.12)
#include <Python.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>

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

// run(x, stream, function, grid_x, block_x, shared_mem, slots, x_slot, out_slot) -> out, or None where
// x's data pointer is not 16-byte aligned (the caller then takes its own path). One launch of grid
// (grid_x, 1, 1) and block (block_x, 1, 1); slots: every argument in an 8-byte slot, x and out
// patched at x_slot and out_slot. x must be a contiguous CUDA tensor on the current device, of the
// shape and dtype the launch was described for (the caller's contract). The arguments are read
// before the driver is looked up, so a machine without one checks their format.
PyObject* run(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9 || !THPVariable_Check(args[0]) || !PyBytes_Check(args[6])) {
    PyErr_SetString(PyExc_TypeError,
                    "run(x: Tensor, stream: int, function: int, grid_x: int, block_x: int, shared_mem: int, "
                    "slots: bytes, x_slot: int, out_slot: int)");
    return nullptr;
  }
  void* stream = PyLong_AsVoidPtr(args[1]);
  if (!stream && PyErr_Occurred()) return nullptr;
  void* function = PyLong_AsVoidPtr(args[2]);
  unsigned long grid_x = PyLong_AsUnsignedLong(args[3]);
  unsigned long block_x = PyLong_AsUnsignedLong(args[4]);
  unsigned long shared_mem = PyLong_AsUnsignedLong(args[5]);
  Py_ssize_t x_slot = PyLong_AsSsize_t(args[7]);
  Py_ssize_t out_slot = PyLong_AsSsize_t(args[8]);
  if (PyErr_Occurred()) return nullptr;
  Py_ssize_t slots_len = PyBytes_GET_SIZE(args[6]);
  std::size_t n = static_cast<std::size_t>(slots_len / 8);
  if (!function || slots_len % 8 || n > kMaxSlots || x_slot < 0 || out_slot < 0 ||
      static_cast<std::size_t>(x_slot) >= n || static_cast<std::size_t>(out_slot) >= n) {
    PyErr_Format(PyExc_ValueError, "run: need a function handle, 8-byte slots (at most %zu) and x and out slots "
                 "among them", kMaxSlots);
    return nullptr;
  }
  if (!resolve_driver()) return nullptr;
  try {
    const at::Tensor& x = THPVariable_Unpack(args[0]);
    auto xp = reinterpret_cast<uint64_t>(x.data_ptr());
    if (xp & 15) Py_RETURN_NONE;
    at::Tensor out = at::empty_like(x);
    auto op = reinterpret_cast<uint64_t>(out.data_ptr());
    if (op & 15) Py_RETURN_NONE;
    uint64_t values[kMaxSlots];
    void* params[kMaxSlots];
    std::memcpy(values, PyBytes_AS_STRING(args[6]), n * 8);
    values[x_slot] = xp;
    values[out_slot] = op;
    for (std::size_t i = 0; i < n; ++i) params[i] = &values[i];
    int status = launch_kernel(function, grid_x, 1, 1, block_x, 1, 1, shared_mem, stream, params, nullptr);
    if (status == kInvalidContext && make_primary_context_current(x.get_device())) {
      status = launch_kernel(function, grid_x, 1, 1, block_x, 1, 1, shared_mem, stream, params, nullptr);
    }
    if (status != 0) {
      PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed: CUresult %d", status);
      return nullptr;
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
    {"run", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run)), METH_FASTCALL,
     "run(x, stream, function, grid_x, block_x, shared_mem, slots, x_slot, out_slot) -> out or None"},
    {"empty_like", empty_like, METH_O, "empty_like(x) -> Tensor"},
    {"param_sizes", param_sizes, METH_O, "param_sizes(function) -> tuple of sizes, or None"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_softmax_native", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__softmax_native() { return PyModule_Create(&module); }
