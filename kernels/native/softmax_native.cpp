// Native allocate-and-launch for softmax launches (kernels/native/__init__.py builds and loads it).
//
// From Python, torch.empty_like costs more than the whole of a small kernel's launch: its argument
// parser alone is a few microseconds. A kernel instance describes an (M, N) call's launch as plain
// values (Build.native: function handle, grid, block, shared memory, 8-byte argument slots with the
// x and out slots), and run issues it as one C call with no object made per shape: allocate the
// output with at::empty_like, patch the two pointers into a copy of the slots, launch on the given
// stream. Function handles and the stream come from the caller, and libcuda is the one the process
// has loaded already; the only CUDA memory kept here is the plans' workspaces of split launches
// (see Workspace), torch tensors freed with their plan.
#define PY_SSIZE_T_CLEAN  // "y#" sizes are Py_ssize_t (required from Python 3.12)
#include <Python.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

using LaunchKernel = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             void*, void**, void**);
using FuncGetParamInfo = int (*)(void*, std::size_t, std::size_t*, std::size_t*);
using DeviceGet = int (*)(int*, int);
using PrimaryCtxRetain = int (*)(void**, int);
using CtxSetCurrent = int (*)(void*);
using StreamIsCapturing = int (*)(void*, int*);
LaunchKernel launch_kernel = nullptr;
FuncGetParamInfo func_get_param_info = nullptr;  // CUDA 12.4+ drivers; null on older ones
DeviceGet device_get = nullptr;
PrimaryCtxRetain primary_ctx_retain = nullptr;
CtxSetCurrent ctx_set_current = nullptr;
StreamIsCapturing stream_is_capturing = nullptr;

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
  stream_is_capturing = reinterpret_cast<StreamIsCapturing>(dlsym(lib, "cuStreamIsCapturing"));
  return true;
}

// Allocate x's output and launch ``function`` on it: ``values`` are the n argument slots, x and out
// patched in at x_slot and out_slot. Returns the output; None where x's or the output's data pointer
// is not 16-byte aligned or the output does not fit in memory (nothing launched: the caller's own path
// then allocates, and raises torch's OutOfMemoryError where it must); nullptr with a Python error
// where the launch fails.
PyObject* allocate_and_launch(const at::Tensor& x, void* stream, void* function, unsigned long grid_x,
                              unsigned long block_x, unsigned long shared_mem, uint64_t* values, std::size_t n,
                              Py_ssize_t x_slot, Py_ssize_t out_slot) {
  if (!resolve_driver()) return nullptr;
  try {
    auto xp = reinterpret_cast<uint64_t>(x.data_ptr());
    if (xp & 15) Py_RETURN_NONE;
    at::Tensor out = at::empty_like(x);
    auto op = reinterpret_cast<uint64_t>(out.data_ptr());
    if (op & 15) Py_RETURN_NONE;
    void* params[kMaxSlots];
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
  } catch (const c10::OutOfMemoryError&) {
    Py_RETURN_NONE;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// run(x, stream, function, grid_x, block_x, shared_mem, slots, x_slot, out_slot) -> out, or None where
// x's data pointer is not 16-byte aligned or the output does not fit in memory (the caller then takes
// its own path). One launch of grid (grid_x, 1, 1) and block (block_x, 1, 1); slots: every argument
// in an 8-byte slot, x and out patched at x_slot and out_slot. x must be a contiguous CUDA tensor on
// the current device, of the shape and dtype the launch was described for (the caller's contract).
// The arguments are read before the driver is looked up, so a machine without one checks their format.
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
  uint64_t values[kMaxSlots];
  std::memcpy(values, PyBytes_AS_STRING(args[6]), n * 8);
  return allocate_and_launch(THPVariable_Unpack(args[0]), stream, function, grid_x, block_x, shared_mem, values, n,
                             x_slot, out_slot);
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

// ---------------------------------------------------------------------------------------------------
// Plans: a new (M, N) launched from C. A plan holds, for one device and dtype, the GPU's decision
// index as the lookup reads it (autotuner/lookup/table.py: the measured points, then per N class a
// partition of M x N into bands, cells and M ranges, each leaf naming its candidate) and, per
// candidate, the rule that derives a launch of any (M, N) from one launch the Python side described
// (kernels/base.py, NativeRule). plan_run picks, derives and launches; where it cannot (no rule, no
// launch learned for N's class yet, a guard that does not hold, shared memory past what was opted
// into, a misaligned output) it returns the candidate it picked, and the caller takes its own path
// and may teach the plan that launch (plan_learn). Integer arithmetic only: the pick is the index's
// own bisects, so the Python lookup and this one agree exactly (a test holds them to it).

constexpr int64_t kMaxGrid = 2147483647;  // gridDim.x limit
constexpr int64_t kNoAnswer = -2;         // the plan's index has no leaf for the shape: the caller picks

struct Rule {
  bool set = false;
  int64_t rows = 1, per_row = 1, cap = 0, vec = 0, parts = 1, held = 0, n_max = 0;
  bool by_class = false;  // a launch per class of N (Triton: BLOCK = next power of two, N's specialisation)
  int64_t m_slot = -1, n_slot = -1;  // the argument slots M and N are packed at (-1: not an argument)
  // S blocks per row (kernels/base.py, RowSplit; split_chunk 0: none): grid M * S, S in s_slot, and the
  // plan's workspace (slot array, ticket counter) of the launch's stream and S in slots_slot and tickets_slot
  int64_t split_chunk = 0, split_min_share = 0, split_resident = 0, split_vec = 0;
  int64_t s_slot = -1, tickets_slot = -1, slots_slot = -1;
  PyObject* guard = nullptr;  // checked before each launch (owned reference): see guard_holds
};

struct Template {
  void* function = nullptr;
  unsigned long block_x = 0, shared_mem = 0, shared_mem_ok = 0;
  std::size_t n = 0;
  Py_ssize_t x_slot = 0, out_slot = 0;
  uint64_t values[kMaxSlots];
};

// The workspace of a split rule's launches on one stream and S (kernels/cuda/slot_workspace.py has the
// Python path's): an int64 slot array of `words`, zero when carved (every epoch 0), carved anew twice
// as large where more rows need it, and a ticket counter (an int32), 0 between launches. A row's
// slots are only ever written by launches of one S, as the slot protocol needs
// (kernels/cuda/slot_exchange.cuh). Both are carved from the stream's Arena: a new S costs no
// allocation or fill of its own (each, tens of microseconds of a call).
struct Workspace {
  uint64_t slots = 0, tickets = 0;
  int64_t words = 0;
};

constexpr int64_t kArenaFirstWords = int64_t{1} << 15;  // 256 KiB, then doubling
constexpr int64_t kArenaMaxWords = int64_t{1} << 21;    // 16 MiB: a larger piece gets a block of its size

// Zeroed int64 blocks of one stream, allocated on it, carved in order and never handed out twice; kept
// until the plan goes (the workspaces hold addresses into them, not tensors).
struct Arena {
  std::vector<at::Tensor> blocks;
  int64_t used = 0;  // words of the last block handed out

  uint64_t carve(int64_t words, const at::TensorOptions& options) {
    words = (words + 1) / 2 * 2;  // pieces 16 bytes apart, as allocations would be
    if (blocks.empty() || used + words > blocks.back().numel()) {
      int64_t size = blocks.empty() ? kArenaFirstWords : std::min(2 * blocks.back().numel(), kArenaMaxWords);
      blocks.push_back(at::zeros({std::max(size, words)}, options.dtype(at::kLong)));
      used = 0;
    }
    uint64_t address = reinterpret_cast<uint64_t>(blocks.back().data_ptr()) + static_cast<uint64_t>(used) * 8;
    used += words;
    return address;
  }
};

struct Partition {
  std::vector<int64_t> m_edges, band_start, n_edges, cell_ref, split_start, split_m, split_leaf, leaf_slot;
};

struct Plan {
  std::vector<std::array<int64_t, 3>> exact;  // (n, m, candidate), sorted
  Partition partitions[2];                    // N % 8 == 0, other N
  std::vector<Rule> rules;                    // per candidate
  std::vector<char> torch_softmax;            // per candidate: torch.softmax's own (as the fallback, -1, is)
  std::vector<std::unordered_map<uint64_t, Template>> templates;  // per candidate, by class of N
  std::unordered_map<uint64_t, Workspace> workspaces;             // split rules': by stream and S (split_key)
  std::unordered_map<uint64_t, Arena> arenas;                     // their memory, by stream
  uint64_t launches = 0, declined = 0;
};

constexpr const char* kPlanCapsule = "softmax_autotuner.plan";

void free_plan(PyObject* capsule) {
  auto* plan = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
  if (!plan) return;
  for (Rule& rule : plan->rules) Py_XDECREF(rule.guard);
  delete plan;
}

Plan* plan_of(PyObject* capsule) {
  return static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));  // sets TypeError/ValueError
}

// the index of the last edge <= value among [first, last), or -1 (bisect_right - 1)
int64_t last_at_most(const int64_t* first, const int64_t* last, int64_t value) {
  return (std::upper_bound(first, last, value) - first) - 1;
}

int64_t pick(const Plan& plan, int64_t m, int64_t n) {
  std::array<int64_t, 3> probe{n, m, INT64_MIN};
  auto found = std::lower_bound(plan.exact.begin(), plan.exact.end(), probe);
  if (found != plan.exact.end() && (*found)[0] == n && (*found)[1] == m) return (*found)[2];
  const Partition& part = plan.partitions[(n & 7) != 0];
  int64_t band = last_at_most(part.m_edges.data(), part.m_edges.data() + part.m_edges.size(), m);
  if (band < 0 || band + 1 >= static_cast<int64_t>(part.band_start.size())) return kNoAnswer;
  int64_t first = part.band_start[band], end = part.band_start[band + 1];
  int64_t cell = last_at_most(part.n_edges.data() + first, part.n_edges.data() + end, n);
  if (cell < 0) return kNoAnswer;
  int64_t ref = part.cell_ref[first + cell], leaf = ref;
  if (ref < 0) {  // a cell split along M: split -(ref + 1)'s ranges
    int64_t split = -(ref + 1);
    int64_t a = part.split_start[split], b = part.split_start[split + 1];
    int64_t range = last_at_most(part.split_m.data() + a, part.split_m.data() + b, m);
    if (range < 0) return kNoAnswer;
    leaf = part.split_leaf[a + range];
  }
  return part.leaf_slot[leaf];
}

// Triton's classes of an int argument: 32-bit range, == 1, divisible by 16 (kernels/triton_impl/launch.py)
uint64_t int_class(int64_t value) {
  return (value >= INT32_MIN && value <= INT32_MAX) * 4 + (value == 1) * 2 + ((value & 15) == 0);
}

// the class of (m, n) a rule keeps one launch for; false where the rule declines it (an argument == 1
// is a constant to Triton: its launch has one argument fewer)
bool class_of(const Rule& rule, int64_t m, int64_t n, uint64_t* key) {
  if (!rule.by_class) { *key = 0; return true; }
  if (n == 1 || (rule.m_slot >= 0 && m == 1)) return false;
  uint64_t log2_block = 0;
  while ((int64_t{1} << log2_block) < n && log2_block < 62) ++log2_block;
  *key = log2_block | int_class(n) << 8 | (rule.m_slot >= 0 ? int_class(m) : 0) << 12;
  return true;
}

// S blocks per row of (m, n), m, n >= 1 (kernels/base.py, split_for)
int64_t split_for(const Rule& rule, int64_t m, int64_t n) {
  int64_t vectors = std::max<int64_t>(n / rule.split_vec, 1);
  int64_t split = (vectors + rule.split_chunk - 1) / rule.split_chunk;
  if (m * split < rule.split_resident) {
    split = std::max(split, std::min(rule.split_resident / m, (vectors + rule.split_min_share - 1) / rule.split_min_share));
  }
  return std::max<int64_t>(1, std::min(split, rule.split_resident));
}

// grid x and dynamic shared memory of (m, n), m, n >= 1, by the rule (kernels/base.py, LaunchGeometry,
// or RowSplit: grid m * S, S in *split); false where the grid does not fit gridDim.x
bool geometry(const Rule& rule, int64_t m, int64_t n, int64_t* grid, int64_t* shared_mem, int64_t* split = nullptr) {
  if (rule.split_chunk) {
    int64_t s = split_for(rule, m, n);
    if (m > kMaxGrid / s) return false;
    *grid = m * s;
    *shared_mem = 0;
    if (split) *split = s;
    return true;
  }
  int64_t blocks = (m + rule.rows - 1) / rule.rows;
  if (blocks > kMaxGrid / rule.per_row) return false;
  blocks *= rule.per_row;
  if (rule.cap && blocks > rule.cap) blocks = rule.cap;
  if (blocks > kMaxGrid) return false;
  *grid = blocks;
  *shared_mem = 0;
  if (rule.vec) {
    int64_t past_registers = ((n / rule.vec) + rule.parts - 1) / rule.parts - rule.held;
    *shared_mem = past_registers > 0 ? past_registers * 16 : 0;
  }
  return true;
}

// the key of a split rule's workspace: its stream and S; false where they do not fit the key (a stream
// handle past 48 bits, S past 16)
bool split_key(int64_t split, void* stream, uint64_t* key) {
  auto handle = reinterpret_cast<uint64_t>(stream);
  if (handle >> 48 || split < 1 || split >> 16) return false;
  *key = static_cast<uint64_t>(split) << 48 | handle;
  return true;
}

bool read_int64s(PyObject* bytes, std::vector<int64_t>* out, const char* what) {
  if (!PyBytes_Check(bytes) || PyBytes_GET_SIZE(bytes) % 8) {
    PyErr_Format(PyExc_TypeError, "plan_new: %s must be bytes of int64 values", what);
    return false;
  }
  out->resize(PyBytes_GET_SIZE(bytes) / 8);
  std::memcpy(out->data(), PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
  return true;
}

// plan_new(candidates, exact, partitions, torch_softmax) -> plan. exact: bytes of int64 (n, m, candidate) triples;
// partitions: two tuples (N % 8 == 0, other N) of 8 bytes objects of int64 values: m_edges, band_start,
// n_edges, cell_ref, split_start, split_m, split_leaf, leaf_candidate (-1: the fallback), as
// autotuner/lookup/table.py documents them; torch_softmax: the candidates that are torch.softmax (as
// the fallback is), which the plan computes with at::softmax, as torch.softmax(x, -1) does.
PyObject* plan_new(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || !PyLong_Check(args[0]) || !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != 2 ||
      !PyTuple_Check(args[3])) {
    PyErr_SetString(PyExc_TypeError, "plan_new(candidates: int, exact: bytes, partitions: (tuple, tuple), "
                    "torch_softmax: tuple of candidates)");
    return nullptr;
  }
  auto plan = std::make_unique<Plan>();
  Py_ssize_t candidates = PyLong_AsSsize_t(args[0]);
  if (candidates < 0 || candidates > 4096) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "plan_new: 0 to 4096 candidates");
    return nullptr;
  }
  plan->rules.resize(candidates);
  plan->templates.resize(candidates);
  plan->torch_softmax.assign(candidates, 0);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[3]); ++i) {
    Py_ssize_t candidate = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[3], i));
    if (candidate < 0 || candidate >= candidates) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "plan_new: a torch_softmax candidate outside the plan");
      return nullptr;
    }
    plan->torch_softmax[candidate] = 1;
  }
  std::vector<int64_t> exact;
  if (!read_int64s(args[1], &exact, "exact") || exact.size() % 3) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "plan_new: exact holds (n, m, candidate) triples");
    return nullptr;
  }
  for (std::size_t i = 0; i < exact.size(); i += 3) plan->exact.push_back({exact[i], exact[i + 1], exact[i + 2]});
  std::sort(plan->exact.begin(), plan->exact.end());
  for (int odd = 0; odd < 2; ++odd) {
    PyObject* fields = PyTuple_GET_ITEM(args[2], odd);
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != 8) {
      PyErr_SetString(PyExc_TypeError, "plan_new: a partition is a tuple of 8 bytes objects");
      return nullptr;
    }
    Partition& part = plan->partitions[odd];
    std::vector<int64_t>* arrays[8] = {&part.m_edges, &part.band_start, &part.n_edges, &part.cell_ref,
                                       &part.split_start, &part.split_m, &part.split_leaf, &part.leaf_slot};
    for (int i = 0; i < 8; ++i) {
      if (!read_int64s(PyTuple_GET_ITEM(fields, i), arrays[i], "a partition array")) return nullptr;
    }
    // every reference stays inside its array, so a damaged index can answer wrong but never read out of bounds
    auto within = [](const std::vector<int64_t>& values, int64_t low, int64_t high) {
      return std::all_of(values.begin(), values.end(), [&](int64_t v) { return v >= low && v <= high; });
    };
    int64_t cells = part.cell_ref.size(), splits = static_cast<int64_t>(part.split_start.size()) - 1;
    int64_t leaves = part.leaf_slot.size();
    bool ok = part.band_start.size() == part.m_edges.size() + 1 && within(part.band_start, 0, cells) &&
              std::is_sorted(part.band_start.begin(), part.band_start.end()) && part.n_edges.size() == part.cell_ref.size() &&
              splits >= 0 && within(part.split_start, 0, part.split_m.size()) &&
              std::is_sorted(part.split_start.begin(), part.split_start.end()) &&
              part.split_m.size() == part.split_leaf.size() && within(part.split_leaf, 0, leaves - 1) &&
              within(part.cell_ref, -splits, leaves - 1) && within(part.leaf_slot, -1, candidates - 1) &&
              (part.split_start.empty() || part.split_start.back() == static_cast<int64_t>(part.split_m.size()));
    if (!ok) {
      PyErr_SetString(PyExc_ValueError, "plan_new: a partition's arrays do not fit together");
      return nullptr;
    }
  }
  for (const auto& point : plan->exact) {
    if (point[2] < -1 || point[2] >= candidates) {
      PyErr_SetString(PyExc_ValueError, "plan_new: an exact point names a candidate outside the plan");
      return nullptr;
    }
  }
  PyObject* capsule = PyCapsule_New(plan.get(), kPlanCapsule, free_plan);
  if (capsule) plan.release();
  return capsule;
}

// plan_pick(plan, m, n) -> candidate (-1: the fallback; -2: the index has no leaf there), m, n >= 1
PyObject* plan_pick(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "plan_pick(plan, m: int, n: int)");
    return nullptr;
  }
  Plan* plan = plan_of(args[0]);
  if (!plan) return nullptr;
  int64_t m = PyLong_AsLongLong(args[1]), n = PyLong_AsLongLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  return PyLong_FromLongLong(m >= 1 && n >= 1 ? pick(*plan, m, n) : kNoAnswer);
}

// Whether a rule's guard holds: a callable returning true, or (runtime, HookChain): Triton's launch hooks
// (runtime.launch_enter_hook, runtime.launch_exit_hook) are both empty HookChains, read here without
// calling Python, as kernels/triton_impl/launch.py's hooks_idle_check states it. -1 with a Python error.
int guard_holds(PyObject* guard) {
  if (PyTuple_Check(guard)) {
    static PyObject* names[2] = {PyUnicode_InternFromString("launch_enter_hook"),
                                 PyUnicode_InternFromString("launch_exit_hook")};
    static PyObject* calls_name = PyUnicode_InternFromString("calls");
    PyObject* runtime = PyTuple_GET_ITEM(guard, 0);
    PyObject* chain_type = PyTuple_GET_ITEM(guard, 1);
    for (PyObject* name : names) {
      PyObject* hook = PyObject_GetAttr(runtime, name);
      if (!hook) return -1;
      bool chain = reinterpret_cast<PyObject*>(Py_TYPE(hook)) == chain_type;
      PyObject* calls = chain ? PyObject_GetAttr(hook, calls_name) : nullptr;
      Py_DECREF(hook);
      if (chain && !calls) return -1;
      bool idle = calls && PyList_CheckExact(calls) && PyList_GET_SIZE(calls) == 0;
      Py_XDECREF(calls);
      if (!idle) return 0;
    }
    return 1;
  }
  PyObject* held = PyObject_CallNoArgs(guard);
  if (!held) return -1;
  int truth = PyObject_IsTrue(held);
  Py_DECREF(held);
  return truth;
}

// a rule as NativeRule.for_plan gives it: 10 ints, or 17 with a RowSplit's (chunk 0: none)
bool read_rule(PyObject* tuple, PyObject* guard, Rule* rule) {
  Py_ssize_t size = PyTuple_Check(tuple) ? PyTuple_GET_SIZE(tuple) : 0;
  if (size != 10 && size != 17) {
    PyErr_SetString(PyExc_TypeError, "a rule is (rows, per_row, cap, vec, parts, held, n_max, by_class, m_slot, "
                    "n_slot[, split_chunk, split_min_share, split_resident, split_vec, s_slot, tickets_slot, slots_slot]), ints");
    return false;
  }
  int64_t v[17] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1};
  for (Py_ssize_t i = 0; i < size; ++i) {
    v[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (PyErr_Occurred()) return false;
  }
  auto slot_ok = [](int64_t slot) { return slot >= -1 && slot < static_cast<int64_t>(kMaxSlots); };
  bool split_ok = v[10] == 0 ? v[11] == 0 && v[12] == 0 && v[13] == 0 :
                  v[10] > 0 && v[11] > 0 && v[12] > 0 && v[13] > 0 && v[14] >= 0 && v[15] >= 0 && v[16] >= 0 && !v[7];
  if (v[0] < 1 || v[1] < 1 || v[2] < 0 || v[3] < 0 || v[4] < 1 || v[6] < 0 || !slot_ok(v[8]) || !slot_ok(v[9]) ||
      !split_ok || !slot_ok(v[14]) || !slot_ok(v[15]) || !slot_ok(v[16])) {
    PyErr_SetString(PyExc_ValueError, "a rule's numbers are out of range");
    return false;
  }
  if (guard != Py_None && !PyCallable_Check(guard) &&
      !(PyTuple_Check(guard) && PyTuple_GET_SIZE(guard) == 2 && PyType_Check(PyTuple_GET_ITEM(guard, 1)))) {
    PyErr_SetString(PyExc_TypeError, "a rule's guard is a callable, (Triton's knobs.runtime, HookChain) or None");
    return false;
  }
  Py_XDECREF(rule->guard);
  *rule = Rule{true, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] != 0, v[8], v[9],
               v[10], v[11], v[12], v[13], v[14], v[15], v[16], nullptr};
  if (guard != Py_None) {
    Py_INCREF(guard);
    rule->guard = guard;
  }
  return true;
}

// plan_learn(plan, candidate, rule, guard, m, n, function, grid_x, block_x, shared_mem, slots, x_slot,
// out_slot) -> bool: keep the launch the caller described for (m, n) (the arguments of run after x and
// the stream) as the candidate's launch for (m, n)'s class, where the rule derives exactly that launch
// from it; false (nothing kept) where it does not. A split rule's launch is kept for every N: the plan
// puts its own workspace of the call's stream and S in it.
PyObject* plan_learn(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 13 || !PyBytes_Check(args[10])) {
    PyErr_SetString(PyExc_TypeError, "plan_learn(plan, candidate, rule, guard, m, n, function, grid_x, block_x, "
                    "shared_mem, slots: bytes, x_slot, out_slot)");
    return nullptr;
  }
  Plan* plan = plan_of(args[0]);
  if (!plan) return nullptr;
  int64_t candidate = PyLong_AsLongLong(args[1]);
  int64_t m = PyLong_AsLongLong(args[4]), n = PyLong_AsLongLong(args[5]);
  void* function = PyLong_AsVoidPtr(args[6]);
  int64_t grid_x = PyLong_AsLongLong(args[7]);
  unsigned long block_x = PyLong_AsUnsignedLong(args[8]);
  unsigned long shared_mem = PyLong_AsUnsignedLong(args[9]);
  Py_ssize_t x_slot = PyLong_AsSsize_t(args[11]), out_slot = PyLong_AsSsize_t(args[12]);
  if (PyErr_Occurred()) return nullptr;
  std::size_t slots = static_cast<std::size_t>(PyBytes_GET_SIZE(args[10]) / 8);
  if (candidate < 0 || candidate >= static_cast<int64_t>(plan->rules.size()) || m < 1 || n < 1 || !function ||
      PyBytes_GET_SIZE(args[10]) % 8 || slots > kMaxSlots || x_slot < 0 || out_slot < 0 ||
      static_cast<std::size_t>(x_slot) >= slots || static_cast<std::size_t>(out_slot) >= slots) {
    PyErr_SetString(PyExc_ValueError, "plan_learn: a candidate of the plan, m, n >= 1 and a launch as run takes it");
    return nullptr;
  }
  Rule& rule = plan->rules[candidate];
  if (!read_rule(args[2], args[3], &rule)) return nullptr;
  Template learned;
  learned.function = function;
  learned.block_x = block_x;
  learned.shared_mem = learned.shared_mem_ok = shared_mem;
  learned.n = slots;
  learned.x_slot = x_slot;
  learned.out_slot = out_slot;
  std::memcpy(learned.values, PyBytes_AS_STRING(args[10]), slots * 8);
  uint64_t key = 0;
  int64_t grid = 0, derived_smem = 0, split = 0;
  auto slot_holds = [&](int64_t slot, int64_t value) {
    return slot < 0 || (static_cast<std::size_t>(slot) < slots && learned.values[slot] == static_cast<uint64_t>(value));
  };
  bool agrees = class_of(rule, m, n, &key) && geometry(rule, m, n, &grid, &derived_smem, &split) && grid == grid_x &&
                (!rule.vec || derived_smem == static_cast<int64_t>(shared_mem)) && (!rule.n_max || n <= rule.n_max) &&
                slot_holds(rule.m_slot, m) && slot_holds(rule.n_slot, n);
  if (agrees && rule.split_chunk) {  // S in its slot, and the workspace slots there for the plan to fill
    agrees = slot_holds(rule.s_slot, split) && static_cast<std::size_t>(rule.slots_slot) < slots &&
             static_cast<std::size_t>(rule.tickets_slot) < slots && shared_mem == 0;
  }
  if (!agrees) Py_RETURN_FALSE;
  auto& kept = plan->templates[candidate];
  auto found = kept.find(key);
  if (found != kept.end() && found->second.function == function) {  // the same kernel: widen the opt-in seen
    found->second.shared_mem_ok = std::max(found->second.shared_mem_ok, shared_mem);
  } else {
    kept[key] = learned;
  }
  Py_RETURN_TRUE;
}

// The workspace addresses of a split launch of m rows in S blocks on stream (the ticket counter's 0 where
// one wave of blocks takes them all), carved or grown here (an arena block allocated on torch's current
// stream, which is the launch's); false where the plan does not launch it (a stream that is capturing a CUDA graph: a
// workspace zeroed there would be zeroed only when the graph replays; the caller's path then takes the
// call), or false with a Python error.
bool split_workspace(Plan* plan, const at::Tensor& x, void* stream, int64_t m, int64_t split, bool one_wave,
                     uint64_t* slots_address, uint64_t* tickets_address) {
  uint64_t key = 0;
  if (!split_key(split, stream, &key)) return false;
  if (x.is_cuda()) {
    if (!resolve_driver()) return false;
    int capturing = 0;
    if (!stream_is_capturing || stream_is_capturing(stream, &capturing) != 0 || capturing != 0) return false;
  }
  try {
    Workspace& workspace = plan->workspaces[key];
    Arena& arena = plan->arenas[reinterpret_cast<uint64_t>(stream)];
    int64_t words = 2 * m * split;
    if (workspace.words < words) {
      int64_t grown = std::max(words, workspace.words ? 2 * workspace.words : 4096);
      workspace.slots = arena.carve(grown, x.options());
      workspace.words = grown;
    }
    if (!one_wave && !workspace.tickets) workspace.tickets = arena.carve(2, x.options());
    *slots_address = workspace.slots;
    *tickets_address = one_wave ? 0 : workspace.tickets;
    return true;
  } catch (const c10::OutOfMemoryError&) {
    return false;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return false;
  }
}

// The softmax of x (2-D contiguous, on the current device, of the plan's dtype: the caller's contract) by
// the plan, or the candidate it picked (an int) where it does not launch it itself (see above). A
// torch.softmax pick (the fallback's included) is at::softmax on torch's current stream, as
// torch.softmax(x, -1) computes it; so is x whose data pointer is not 16-byte aligned (a row view such
// as logits[:, -1] of one sequence with an odd vocabulary): a Triton launch is specialised on aligned
// pointers, and the caller's own path costs about twice torch.softmax's host time where this costs
// what torch.softmax does (bench/probes/misaligned_rows.py).
PyObject* run_plan(Plan* plan, const at::Tensor& x, void* stream) {
  int64_t m = x.size(0), n = x.size(1);
  int64_t candidate = m >= 1 && n >= 1 ? pick(*plan, m, n) : kNoAnswer;
  if (candidate == kNoAnswer) return PyLong_FromLongLong(candidate);
  bool misaligned = reinterpret_cast<std::uintptr_t>(x.data_ptr()) & 15;
  if (candidate == -1 || plan->torch_softmax[candidate] || misaligned) {  // torch.softmax(x, -1), without its argument parser
    try {
      PyObject* out = THPVariable_Wrap(at::softmax(x, -1));
      if (out) ++plan->launches;
      return out;
    } catch (const c10::OutOfMemoryError&) {  // the caller's torch.softmax raises torch's own error
      ++plan->declined;
      return PyLong_FromLongLong(candidate);
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return nullptr;
    }
  }
  const Rule& rule = plan->rules[candidate];
  uint64_t key = 0;
  int64_t grid = 0, shared_mem = 0, split = 0;
  if (!rule.set || (rule.n_max && n > rule.n_max) || !class_of(rule, m, n, &key) ||
      !geometry(rule, m, n, &grid, &shared_mem, &split)) {
    ++plan->declined;
    return PyLong_FromLongLong(candidate);
  }
  int64_t m_slot = rule.m_slot, n_slot = rule.n_slot, s_slot = rule.split_chunk ? rule.s_slot : -1;
  int64_t tickets_slot = rule.tickets_slot, slots_slot = rule.slots_slot;
  bool one_wave = m * split <= rule.split_resident;
  bool derived_smem = rule.vec != 0;
  if (rule.guard) {  // may run Python code: another thread may teach the plan meanwhile, so nothing is held across it
    PyObject* guard = rule.guard;
    Py_INCREF(guard);
    int truth = guard_holds(guard);
    Py_DECREF(guard);
    if (truth < 0) return nullptr;
    if (!truth) {
      ++plan->declined;
      return PyLong_FromLongLong(candidate);
    }
  }
  auto& kept = plan->templates[candidate];
  auto found = kept.find(key);
  if (found == kept.end()) {
    ++plan->declined;
    return PyLong_FromLongLong(candidate);
  }
  const Template& launch = found->second;
  if (!derived_smem) shared_mem = launch.shared_mem;
  if (static_cast<unsigned long>(shared_mem) > launch.shared_mem_ok) {
    ++plan->declined;
    return PyLong_FromLongLong(candidate);
  }
  uint64_t slots_address = 0, tickets_address = 0;
  if (s_slot >= 0 && !split_workspace(plan, x, stream, m, split, one_wave, &slots_address, &tickets_address)) {
    if (PyErr_Occurred()) return nullptr;
    ++plan->declined;
    return PyLong_FromLongLong(candidate);
  }
  uint64_t values[kMaxSlots];
  std::memcpy(values, launch.values, launch.n * 8);
  if (m_slot >= 0) values[m_slot] = static_cast<uint64_t>(m);
  if (n_slot >= 0) values[n_slot] = static_cast<uint64_t>(n);
  if (s_slot >= 0) {
    values[s_slot] = static_cast<uint64_t>(split);
    values[slots_slot] = slots_address;
    values[tickets_slot] = tickets_address;
  }
  PyObject* out = allocate_and_launch(x, stream, launch.function, grid, launch.block_x, shared_mem, values, launch.n,
                                      launch.x_slot, launch.out_slot);
  if (out == Py_None) {  // a misaligned pointer, or no memory for the output
    Py_DECREF(out);
    ++plan->declined;
    return PyLong_FromLongLong(candidate);
  }
  if (out) ++plan->launches;
  return out;
}

// plan_run(plan, x, stream) -> run_plan's answer for x on the given stream
PyObject* plan_run(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !THPVariable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "plan_run(plan, x: Tensor, stream: int)");
    return nullptr;
  }
  Plan* plan = plan_of(args[0]);
  if (!plan) return nullptr;
  void* stream = PyLong_AsVoidPtr(args[2]);
  if (!stream && PyErr_Occurred()) return nullptr;
  const at::Tensor& x = THPVariable_Unpack(args[1]);
  if (x.dim() != 2) {
    PyErr_SetString(PyExc_ValueError, "plan_run: x must be 2-D");
    return nullptr;
  }
  return run_plan(plan, x, stream);
}

// ---------------------------------------------------------------------------------------------------
// dispatch(x, dim): softmax()'s first step (autotuner/runtime.py), the Python checks of a call done in
// C. Routes name the plan of each (device, dtype) with the table store and generation it was made
// from; a route is taken while the lookup's default store (select_module._default_store) is that store
// at that generation, and while the device is the current one.

struct Route {
  PyObject* plan = nullptr;  // owned references, all three, or all null
  PyObject* store = nullptr;
  PyObject* generation = nullptr;
};

struct Dispatch {
  PyObject* select_module = nullptr;  // owned; null until dispatch_setup
  PyObject* current_device = nullptr;
  PyObject* raw_stream = nullptr;
  std::vector<std::array<Route, 3>> routes;  // by device + 1 (-1: the CPU, for tests), then dtype
} dispatching;

int dtype_index(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return 0;
    case at::kHalf: return 1;
    case at::kBFloat16: return 2;
    default: return -1;
  }
}

void release(Route* route) {
  Py_CLEAR(route->plan);
  Py_CLEAR(route->store);
  Py_CLEAR(route->generation);
}

// dispatch_setup(select_module, current_device, raw_stream): what dispatch reads the default store
// from, and torch's current-device and raw current-stream getters
PyObject* dispatch_setup(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "dispatch_setup(select_module, current_device: callable, raw_stream: callable)");
    return nullptr;
  }
  PyObject** fields[3] = {&dispatching.select_module, &dispatching.current_device, &dispatching.raw_stream};
  for (int i = 0; i < 3; ++i) {
    Py_INCREF(args[i]);
    Py_XSETREF(*fields[i], args[i]);
  }
  Py_RETURN_NONE;
}

// dispatch_route(device, dtype, plan, store, generation): take (device, dtype: "fp32", "fp16" or
// "bf16") rows to plan while store is the default one at generation; plan None: to nobody
PyObject* dispatch_route(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "dispatch_route(device: int, dtype: str, plan, store, generation)");
    return nullptr;
  }
  long device = PyLong_AsLong(args[0]);
  if (PyErr_Occurred()) return nullptr;
  const char* dtype = PyUnicode_AsUTF8(args[1]);
  if (!dtype) return nullptr;
  int index = !std::strcmp(dtype, "fp32") ? 0 : !std::strcmp(dtype, "fp16") ? 1 : !std::strcmp(dtype, "bf16") ? 2 : -1;
  if (device < -1 || device > 1023 || index < 0 || (args[2] != Py_None && !plan_of(args[2]))) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "dispatch_route: a device from -1 to 1023, a dtype fp32, fp16 or bf16");
    return nullptr;
  }
  if (dispatching.routes.size() < static_cast<std::size_t>(device + 2)) dispatching.routes.resize(device + 2);
  Route old = dispatching.routes[device + 1][index];
  Route route;
  if (args[2] != Py_None) {
    route = Route{args[2], args[3], args[4]};
    Py_INCREF(args[2]);
    Py_INCREF(args[3]);
    Py_INCREF(args[4]);
  }
  dispatching.routes[device + 1][index] = route;
  release(&old);  // last: a destructor may run Python code
  Py_RETURN_NONE;
}

// dispatch(x, dim) -> the softmax of x by its route's plan, the candidate that plan picked (an int)
// where it does not launch it itself, or None where x takes no route: not a plain Tensor, dim not the
// last of 2 (-1 or 1), rows not contiguous, M or N = 0, a call autograd would record (x requires grad,
// grad mode on), no route for its device and dtype, the tables changed since, or its device not the
// current one.
PyObject* dispatch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "dispatch(x, dim)");
    return nullptr;
  }
  if (Py_TYPE(args[0]) != reinterpret_cast<PyTypeObject*>(THPVariableClass) || !dispatching.select_module ||
      !PyLong_CheckExact(args[1])) {
    Py_RETURN_NONE;
  }
  long dim = PyLong_AsLong(args[1]);
  if (dim == -1 && PyErr_Occurred()) return nullptr;
  const at::Tensor& x = THPVariable_Unpack(args[0]);
  if ((dim != -1 && dim != 1) || x.dim() != 2 || !x.is_contiguous() || x.size(0) < 1 || x.size(1) < 1) Py_RETURN_NONE;
  if (x.requires_grad() && c10::GradMode::is_enabled()) Py_RETURN_NONE;  // autograd records it: torch.softmax's
  int index = dtype_index(x.scalar_type());
  int64_t device = x.get_device();
  if (index < 0 || device + 1 >= static_cast<int64_t>(dispatching.routes.size())) Py_RETURN_NONE;
  Route route = dispatching.routes[device + 1][index];
  if (!route.plan) Py_RETURN_NONE;
  // held across the Python calls below, which may let another thread re-route
  Py_INCREF(route.plan);
  Py_INCREF(route.store);
  Py_INCREF(route.generation);
  PyObject* answer = nullptr;
  PyObject* current = nullptr;
  PyObject* stream = nullptr;
  PyObject* store = PyObject_GetAttrString(dispatching.select_module, "_default_store");
  PyObject* generation = store == route.store ? PyObject_GetAttrString(store, "generation") : nullptr;
  int same = generation ? PyObject_RichCompareBool(generation, route.generation, Py_EQ) : 0;
  if (same > 0) current = PyObject_CallNoArgs(dispatching.current_device);
  if (current && PyLong_Check(current) && PyLong_AsLongLong(current) == device) {
    PyObject* index_object = PyLong_FromLongLong(device);
    stream = index_object ? PyObject_CallOneArg(dispatching.raw_stream, index_object) : nullptr;
    Py_XDECREF(index_object);
    void* raw = stream ? PyLong_AsVoidPtr(stream) : nullptr;
    if (stream && !PyErr_Occurred()) answer = run_plan(plan_of(route.plan), x, raw);
  } else if (!PyErr_Occurred()) {
    answer = Py_NewRef(Py_None);
  }
  if (!answer && !PyErr_Occurred()) answer = Py_NewRef(Py_None);  // the store changed: no route
  Py_XDECREF(stream);
  Py_XDECREF(current);
  Py_XDECREF(generation);
  Py_XDECREF(store);
  release(&route);
  return answer;
}

// plan_geometry(rule, m, n) -> (grid_x, shared_mem), or None where the grid does not fit: the C reading
// of a rule, for the test that holds it to the Python one (kernels/base.py, LaunchGeometry)
PyObject* plan_geometry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "plan_geometry(rule, m: int, n: int)");
    return nullptr;
  }
  Rule rule;
  if (!read_rule(args[0], Py_None, &rule)) return nullptr;
  int64_t m = PyLong_AsLongLong(args[1]), n = PyLong_AsLongLong(args[2]), grid = 0, shared_mem = 0;
  if (PyErr_Occurred()) return nullptr;
  if (m < 1 || n < 1 || !geometry(rule, m, n, &grid, &shared_mem)) Py_RETURN_NONE;
  return Py_BuildValue("(LL)", static_cast<long long>(grid), static_cast<long long>(shared_mem));
}

// plan_stats(plan) -> {"launches", "declined", "launches_kept", "workspaces"}: what the plan did, what it holds
PyObject* plan_stats(PyObject*, PyObject* capsule) {
  Plan* plan = plan_of(capsule);
  if (!plan) return nullptr;
  std::size_t kept = 0;
  for (const auto& templates : plan->templates) kept += templates.size();
  return Py_BuildValue("{sKsKsnsn}", "launches", static_cast<unsigned long long>(plan->launches), "declined",
                       static_cast<unsigned long long>(plan->declined), "launches_kept", static_cast<Py_ssize_t>(kept),
                       "workspaces", static_cast<Py_ssize_t>(plan->workspaces.size()));
}

using FastCall = PyObject* (*)(PyObject*, PyObject* const*, Py_ssize_t);

// A METH_FASTCALL function as the method table holds it (a PyCFunction, cast as CPython's own tables do)
PyCFunction fastcall(FastCall function) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(function));
}

PyMethodDef methods[] = {
    {"run", fastcall(run), METH_FASTCALL,
     "run(x, stream, function, grid_x, block_x, shared_mem, slots, x_slot, out_slot) -> out or None"},
    {"empty_like", empty_like, METH_O, "empty_like(x) -> Tensor"},
    {"param_sizes", param_sizes, METH_O, "param_sizes(function) -> tuple of sizes, or None"},
    {"plan_new", fastcall(plan_new), METH_FASTCALL,
     "plan_new(candidates, exact, partitions, torch_softmax) -> plan"},
    {"plan_pick", fastcall(plan_pick), METH_FASTCALL, "plan_pick(plan, m, n) -> candidate"},
    {"plan_learn", fastcall(plan_learn), METH_FASTCALL,
     "plan_learn(plan, candidate, rule, guard, m, n, function, grid_x, block_x, shared_mem, slots, x_slot, out_slot) -> bool"},
    {"plan_run", fastcall(plan_run), METH_FASTCALL, "plan_run(plan, x, stream) -> out or the candidate picked"},
    {"plan_geometry", fastcall(plan_geometry), METH_FASTCALL,
     "plan_geometry(rule, m, n) -> (grid_x, shared_mem) or None"},
    {"plan_stats", plan_stats, METH_O, "plan_stats(plan) -> dict"},
    {"dispatch_setup", fastcall(dispatch_setup), METH_FASTCALL,
     "dispatch_setup(select_module, current_device, raw_stream)"},
    {"dispatch_route", fastcall(dispatch_route), METH_FASTCALL,
     "dispatch_route(device, dtype, plan, store, generation)"},
    {"dispatch", fastcall(dispatch), METH_FASTCALL, "dispatch(x, dim) -> out, the candidate picked, or None"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_softmax_native", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__softmax_native() { return PyModule_Create(&module); }
