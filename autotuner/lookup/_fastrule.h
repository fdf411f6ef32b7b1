/* Shared by the compiled lookup rule's sources (_fastrule.c, _fastrule_fit.c, _fastrule_model.c):
 * sum() as the running interpreter computes it, and the functions each file gives the module. */
#ifndef AUTOTUNER_FASTRULE_H
#define AUTOTUNER_FASTRULE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>

/* ---- sum() as the running interpreter computes it ------------------------------------------- */
typedef struct {
    double hi;
    double lo;
} Sum;

static inline void sum_add(Sum *s, double x) {
#if PY_VERSION_HEX >= 0x030C0000
    double t = s->hi + x;
    if (fabs(s->hi) >= fabs(x))
        s->lo += (s->hi - t) + x;
    else
        s->lo += (x - t) + s->hi;
    s->hi = t;
#else
    s->hi += x;
#endif
}

static inline double sum_value(Sum s) {
#if PY_VERSION_HEX >= 0x030C0000
    if (s.lo != 0.0 && isfinite(s.lo))
        return s.hi + s.lo;
#endif
    return s.hi;
}

static inline double log2_or_zero(long long v) { return v > 1 ? log2((double)v) : 0.0; }

/* bisect.bisect_left over values[0:count] */
static inline Py_ssize_t bisect_left_ll(const long long *values, Py_ssize_t count, long long x) {
    Py_ssize_t lo = 0, hi = count;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (values[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

#define MAX_NEIGHBOURS 64 /* a stencil has at most 8; the fit's arrays are sized for this many */

/* _fastrule_fit.c: regret.best (with fit_offsets), regret.plan, and the constants they share */
PyObject *fastrule_best(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fastrule_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *fastrule_configure(PyObject *self, PyObject *args);
/* _fastrule_model.c: predict._Model.time */
PyObject *fastrule_make_model(PyObject *self, PyObject *args);
PyObject *fastrule_model_time(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
