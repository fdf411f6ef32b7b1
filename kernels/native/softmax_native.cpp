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
//
// One translation unit in four parts, included below in order: launch.inc (the driver, run),
// plan_index.inc (a plan's index and rules, plan_new, plan_pick), plan_launch.inc (plan_learn,
// run_plan), dispatch.inc (dispatch, softmax()'s first step); then the module's method table.
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

#include "launch.inc"
#include "plan_index.inc"
#include "plan_launch.inc"
#include "dispatch.inc"

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
