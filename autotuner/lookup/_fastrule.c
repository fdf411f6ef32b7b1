/* The local-regret rule's per-lookup arithmetic in C, part 1 (and the module): regret.py's
 * stencil_by_lines and the nearest-point search of DispatchTable._nearest. Part 2, _fastrule_fit.c:
 * regret.plan and regret.best (with fit_offsets); part 3, _fastrule_model.c: the scaling model's time
 * (predict._Model.time). _fastrule.h: what they share.
 *
 * Contract: every function returns what its Python counterpart returns, to the last bit. Each float
 * is computed by the same IEEE operations in the same order as the Python code, and every sum() of
 * the Python code is the interpreter's own sum: plain left-to-right addition before Python 3.12,
 * Neumaier's compensated summation from 3.12 on (Python/bltinmodule.c). tests/autotuner/
 * test_fastrule.py compares the two on every shipped table. The module is optional: without it (no
 * C compiler at install) the lookup runs the Python code, which gives the same answers more slowly.
 */
#include "_fastrule.h"

/* ---- a layout: the measured points as lines (regret.Layout) ---------------------------------- */
typedef struct {
    Py_ssize_t count;       /* lines */
    long long *keys;        /* each line's M (rows) or N (columns), ascending */
    double *reach_lo;       /* the other axis's range the clamped rule reads the line in */
    double *reach_hi;
    long long factor;       /* how far from the query a value between two measured ones is still read */
    Py_ssize_t *start;      /* line k's values are values[start[k]:start[k + 1]], ascending */
    long long *values;
} Lines;

typedef struct {
    Lines rows, cols;
} Layout;

static const char *LAYOUT_CAPSULE = "autotuner.lookup._fastrule.layout";

static void free_lines(Lines *l) {
    free(l->keys);
    free(l->reach_lo);
    free(l->reach_hi);
    free(l->start);
    free(l->values);
}

static void layout_destructor(PyObject *capsule) {
    Layout *layout = (Layout *)PyCapsule_GetPointer(capsule, LAYOUT_CAPSULE);
    if (layout) {
        free_lines(&layout->rows);
        free_lines(&layout->cols);
        free(layout);
    }
}

/* keys: sequence of ints; lines: sequence (per key) of sequences of ints; reach: sequence of (lo, hi) */
static int fill_lines(Lines *l, PyObject *keys, PyObject *lines, PyObject *reach) {
    PyObject *keys_f = PySequence_Fast(keys, "keys must be a sequence");
    PyObject *lines_f = keys_f ? PySequence_Fast(lines, "lines must be a sequence") : NULL;
    PyObject *reach_f = lines_f ? PySequence_Fast(reach, "reach must be a sequence") : NULL;
    int ok = 0;
    if (!reach_f)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(keys_f);
    if (PySequence_Fast_GET_SIZE(lines_f) != count || PySequence_Fast_GET_SIZE(reach_f) != count) {
        PyErr_SetString(PyExc_ValueError, "keys, lines and reach differ in length");
        goto done;
    }
    l->count = count;
    l->keys = malloc(sizeof(long long) * (count ? count : 1));
    l->reach_lo = malloc(sizeof(double) * (count ? count : 1));
    l->reach_hi = malloc(sizeof(double) * (count ? count : 1));
    l->start = malloc(sizeof(Py_ssize_t) * (count + 1));
    if (!l->keys || !l->reach_lo || !l->reach_hi || !l->start) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        l->keys[k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(keys_f, k));
        PyObject *pair = PySequence_Fast_GET_ITEM(reach_f, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "reach items must be (low, high) tuples");
            goto done;
        }
        l->reach_lo[k] = PyFloat_AsDouble(PyTuple_GET_ITEM(pair, 0));
        l->reach_hi[k] = PyFloat_AsDouble(PyTuple_GET_ITEM(pair, 1));
        Py_ssize_t size = PySequence_Size(PySequence_Fast_GET_ITEM(lines_f, k));
        if (size < 1) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "every line needs a value");
            goto done;
        }
        l->start[k] = total;
        total += size;
    }
    l->start[count] = total;
    if (PyErr_Occurred())
        goto done;
    l->values = malloc(sizeof(long long) * (total ? total : 1));
    if (!l->values) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *line = PySequence_Fast(PySequence_Fast_GET_ITEM(lines_f, k), "a line must be a sequence");
        if (!line)
            goto done;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(line); j++)
            l->values[l->start[k] + j] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(line, j));
        Py_DECREF(line);
    }
    ok = !PyErr_Occurred();
done:
    Py_XDECREF(keys_f);
    Py_XDECREF(lines_f);
    Py_XDECREF(reach_f);
    return ok;
}

static PyObject *make_layout(PyObject *self, PyObject *args) {
    PyObject *row_keys, *rows, *row_reach, *col_keys, *cols, *col_reach;
    long long row_factor, col_factor;
    if (!PyArg_ParseTuple(args, "OOOOOOLL", &row_keys, &rows, &row_reach, &col_keys, &cols, &col_reach,
                          &row_factor, &col_factor))
        return NULL;
    if (row_factor < 1 || col_factor < 1) {
        PyErr_SetString(PyExc_ValueError, "reach factors must be at least 1");
        return NULL;
    }
    Layout *layout = calloc(1, sizeof(Layout));
    if (!layout)
        return PyErr_NoMemory();
    layout->rows.factor = row_factor;
    layout->cols.factor = col_factor;
    if (!fill_lines(&layout->rows, row_keys, rows, row_reach) || !fill_lines(&layout->cols, col_keys, cols, col_reach)) {
        free_lines(&layout->rows);
        free_lines(&layout->cols);
        free(layout);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(layout, LAYOUT_CAPSULE, layout_destructor);
    if (!capsule) {
        free_lines(&layout->rows);
        free_lines(&layout->cols);
        free(layout);
    }
    return capsule;
}

/* ---- stencil_by_lines ------------------------------------------------------------------------- */
/* an axis adds at most 4 corners (two lines, two values on each): 8 in all */

typedef struct {
    long long m, n;
    double weight;
} Corner;

typedef struct {
    long long value;
    double weight;
} Bracketed;

/* regret.log_bracket over values[0:count]: 1 or 2 (value, weight) pairs */
static int log_bracket(const long long *values, Py_ssize_t count, long long x, double log_x, Bracketed out[2]) {
    if (x <= values[0]) {
        out[0].value = values[0];
        out[0].weight = 1.0;
        return 1;
    }
    if (x >= values[count - 1]) {
        out[0].value = values[count - 1];
        out[0].weight = 1.0;
        return 1;
    }
    Py_ssize_t lo_i = bisect_left_ll(values, count, x);
    long long lo = values[lo_i - 1], hi = values[lo_i];
    if (hi == x) {
        out[0].value = hi;
        out[0].weight = 1.0;
        return 1;
    }
    double log_lo = log2_or_zero(lo), log_hi = log2_or_zero(hi);
    double weight = (log_x - log_lo) / (log_hi - log_lo);
    out[0].value = lo;
    out[0].weight = 1.0 - weight;
    out[1].value = hi;
    out[1].weight = weight;
    return 2;
}

/* regret._along_lines then _add_normalised: one axis's corners added to acc (insertion order kept) */
static int along_lines(Corner *acc, int used, const Lines *l, long long at, double log_at, long long across,
                       double log_across, int clamped, int rows, long long *scratch) {
    const long long *keys = l->keys;
    Py_ssize_t count = l->count;
    Py_ssize_t *index_of = NULL;
    Py_ssize_t *filtered_index = (Py_ssize_t *)(scratch + l->count); /* positions of kept keys */
    if (!clamped) {
        Py_ssize_t kept = 0;
        for (Py_ssize_t k = 0; k < l->count; k++) {
            const long long *v = l->values + l->start[k];
            if (v[0] <= across && across <= v[l->start[k + 1] - l->start[k] - 1]) {
                scratch[kept] = keys[k];
                filtered_index[kept] = k;
                kept++;
            }
        }
        keys = scratch;
        count = kept;
        index_of = filtered_index;
    }
    if (count == 0)
        return used;
    Bracketed lines[2];
    int nlines = log_bracket(keys, count, at, log_at, lines);
    Corner found[4];
    double parts[4];
    int nfound = 0;
    for (int b = 0; b < nlines; b++) {
        /* the bracketed key's line: its index in the full key list */
        Py_ssize_t at_key = bisect_left_ll(keys, count, lines[b].value);
        Py_ssize_t k = index_of ? index_of[at_key] : at_key;
        double across_d = (double)across;
        if (!(l->reach_lo[k] <= across_d && across_d <= l->reach_hi[k]))
            continue;
        Bracketed values[2];
        int nvalues = log_bracket(l->values + l->start[k], l->start[k + 1] - l->start[k], across, log_across, values);
        if (clamped && nvalues == 2) { /* regret._within_reach */
            int far_lo = across > values[0].value * l->factor, far_hi = values[1].value > across * l->factor;
            if (far_lo && far_hi)
                continue;
            if (far_lo) {
                values[0].value = values[1].value;
                values[0].weight = 1.0;
                nvalues = 1;
            } else if (far_hi) {
                values[0].weight = 1.0;
                nvalues = 1;
            }
        }
        for (int v = 0; v < nvalues; v++) {
            found[nfound].m = rows ? lines[b].value : values[v].value;
            found[nfound].n = rows ? values[v].value : lines[b].value;
            parts[nfound] = lines[b].weight * values[v].weight;
            nfound++;
        }
    }
    Sum total = {0.0, 0.0};
    for (int i = 0; i < nfound; i++)
        sum_add(&total, parts[i]);
    double total_d = sum_value(total);
    for (int i = 0; i < nfound; i++) {
        if (!(parts[i] > 0))
            continue;
        double add = parts[i] / total_d;
        int j = 0;
        for (; j < used; j++)
            if (acc[j].m == found[i].m && acc[j].n == found[i].n)
                break;
        if (j == used) {
            acc[used].m = found[i].m;
            acc[used].n = found[i].n;
            acc[used].weight = 0.0 + add;
            used++;
        } else {
            acc[j].weight = acc[j].weight + add;
        }
    }
    return used;
}

static int corner_less(const void *a, const void *b) {
    const Corner *x = a, *y = b;
    if (x->m != y->m)
        return x->m < y->m ? -1 : 1;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return 0;
}

static PyObject *stencil(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "stencil(layout, m, n, clamped)");
        return NULL;
    }
    Layout *layout = (Layout *)PyCapsule_GetPointer(args[0], LAYOUT_CAPSULE);
    if (!layout)
        return NULL;
    long long m = PyLong_AsLongLong(args[1]), n = PyLong_AsLongLong(args[2]);
    int clamped = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred() || clamped < 0)
        return NULL;
    double log_m = log2_or_zero(m), log_n = log2_or_zero(n);
    Py_ssize_t most = layout->rows.count > layout->cols.count ? layout->rows.count : layout->cols.count;
    /* scratch: filtered keys, then their positions (Py_ssize_t fits in a long long slot) */
    long long on_stack[512];
    long long *scratch = 2 * most + 2 <= 512 ? on_stack : malloc(sizeof(long long) * (2 * most + 2));
    if (!scratch)
        return PyErr_NoMemory();
    Corner acc[8];
    int used = 0;
    used = along_lines(acc, used, &layout->rows, m, log_m, n, log_n, clamped, 1, scratch);
    used = along_lines(acc, used, &layout->cols, n, log_n, m, log_m, clamped, 0, scratch);
    if (scratch != on_stack)
        free(scratch);
    Sum total = {0.0, 0.0};
    for (int i = 0; i < used; i++)
        sum_add(&total, acc[i].weight);
    double total_d = sum_value(total);
    if (!(total_d > 0))
        return Py_BuildValue("(()[])");
    qsort(acc, used, sizeof(Corner), corner_less);
    PyObject *corners = PyTuple_New(used), *weights = PyList_New(used);
    if (!corners || !weights)
        goto fail;
    for (int i = 0; i < used; i++) {
        PyObject *corner = Py_BuildValue("(LL)", acc[i].m, acc[i].n);
        PyObject *weight = PyFloat_FromDouble(acc[i].weight / total_d);
        if (!corner || !weight) {
            Py_XDECREF(corner);
            Py_XDECREF(weight);
            goto fail;
        }
        PyTuple_SET_ITEM(corners, i, corner);
        PyList_SET_ITEM(weights, i, weight);
    }
    PyObject *result = PyTuple_Pack(2, corners, weights);
    Py_DECREF(corners);
    Py_DECREF(weights);
    return result;
fail:
    Py_XDECREF(corners);
    Py_XDECREF(weights);
    return NULL;
}

/* ---- the nearest point ------------------------------------------------------------------------ */
/* nearest(logs, log_m, log_n): the index of min((pm - lm) ** 2 + (pn - ln) ** 2, index) over logs, a
 * buffer of doubles (pm, pn, pm, pn, ...); -1 for none. x ** 2 is libm's pow(|x|, 2.0), as Python's
 * float power computes it for an integral exponent. */
static PyObject *nearest(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "nearest(logs, log_m, log_n)");
        return NULL;
    }
    double lm = PyFloat_AsDouble(args[1]), ln = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const double *logs = view.buf;
    Py_ssize_t count = view.len / (Py_ssize_t)(2 * sizeof(double));
    volatile double two = 2.0; /* keeps the compiler from turning pow(x, 2.0) into x * x */
    double best_d = 0.0;
    Py_ssize_t best_i = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        double d = pow(fabs(logs[2 * i] - lm), two) + pow(fabs(logs[2 * i + 1] - ln), two);
        if (best_i < 0 || d < best_d) {
            best_d = d;
            best_i = i;
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(best_i);
}

static PyMethodDef methods[] = {
    {"make_layout", make_layout, METH_VARARGS,
     "make_layout(row_keys, rows, row_reach, col_keys, cols, col_reach, row_factor, col_factor)"},
    {"stencil", (PyCFunction)(void (*)(void))stencil, METH_FASTCALL, "stencil(layout, m, n, clamped)"},
    {"best", (PyCFunction)(void (*)(void))fastrule_best, METH_FASTCALL, "best(plan, weights)"},
    {"plan", (PyCFunction)(void (*)(void))fastrule_plan, METH_FASTCALL, "plan(log_regrets, gaps, allowed)"},
    {"configure", fastrule_configure, METH_VARARGS, "configure(dominated, fit_passes)"},
    {"nearest", (PyCFunction)(void (*)(void))nearest, METH_FASTCALL, "nearest(logs, log_m, log_n)"},
    {"make_model", fastrule_make_model, METH_VARARGS, "make_model(row_ms, lines, scale_limit)"},
    {"model_time", (PyCFunction)(void (*)(void))fastrule_model_time, METH_FASTCALL, "model_time(model, m, n, copy_rate)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastrule", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastrule(void) { return PyModule_Create(&module); }
