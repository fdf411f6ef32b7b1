/* The local-regret rule's per-lookup arithmetic in C: autotuner/lookup/regret.py's stencil_by_lines
 * and best (with fit_offsets), the nearest-point search of DispatchTable._nearest, and the scaling
 * model's time (predict._Model.time).
 *
 * Contract: every function returns what its Python counterpart returns, to the last bit. Each float
 * is computed by the same IEEE operations in the same order as the Python code, and every sum() of
 * the Python code is the interpreter's own sum: plain left-to-right addition before Python 3.12,
 * Neumaier's compensated summation from 3.12 on (Python/bltinmodule.c). tests/autotuner/
 * test_fastrule.py compares the two on every shipped table. The module is optional: without it (no
 * C compiler at install) the lookup runs the Python code, which gives the same answers more slowly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- a layout: the measured points as lines (regret.Layout) ---------------------------------- */
typedef struct {
    Py_ssize_t count;       /* lines */
    long long *keys;        /* each line's M (rows) or N (columns), ascending */
    double *reach_lo;       /* the other axis's range the clamped rule reads the line in */
    double *reach_hi;
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
    if (!PyArg_ParseTuple(args, "OOOOOO", &row_keys, &rows, &row_reach, &col_keys, &cols, &col_reach))
        return NULL;
    Layout *layout = calloc(1, sizeof(Layout));
    if (!layout)
        return PyErr_NoMemory();
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
    Py_ssize_t lo_i = 0, hi_i = count; /* bisect_left */
    while (lo_i < hi_i) {
        Py_ssize_t mid = (lo_i + hi_i) / 2;
        if (values[mid] < x)
            lo_i = mid + 1;
        else
            hi_i = mid;
    }
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
        Py_ssize_t k;
        {
            Py_ssize_t lo_i = 0, hi_i = count;
            while (lo_i < hi_i) {
                Py_ssize_t mid = (lo_i + hi_i) / 2;
                if (keys[mid] < lines[b].value)
                    lo_i = mid + 1;
                else
                    hi_i = mid;
            }
            k = index_of ? index_of[lo_i] : lo_i;
        }
        double across_d = (double)across;
        if (!(l->reach_lo[k] <= across_d && across_d <= l->reach_hi[k]))
            continue;
        Bracketed values[2];
        int nvalues = log_bracket(l->values + l->start[k], l->start[k + 1] - l->start[k], across, log_across, values);
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

/* ---- best and fit_offsets ------------------------------------------------------------------- */
static double dominated = 1e-9; /* regret._DOMINATED */
static long fit_passes = 2;     /* regret.FIT_PASSES */

#define MAX_NEIGHBOURS 64
#define MAX_GROUPS 256

/* sum(map(mul, weights, values)) over a tuple of floats */
static int weighted_sum(const double *weights, Py_ssize_t k, PyObject *values, double *out) {
    if (!PyTuple_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "log regrets must be a tuple");
        return 0;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(values);
    if (count > k)
        count = k;
    Sum s = {0.0, 0.0};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *value = PyTuple_GET_ITEM(values, i);
        if (!PyFloat_CheckExact(value)) {
            PyErr_SetString(PyExc_TypeError, "log regrets must be floats");
            return 0;
        }
        sum_add(&s, weights[i] * PyFloat_AS_DOUBLE(value));
    }
    *out = sum_value(s);
    return 1;
}

typedef struct {
    int live;
    Py_ssize_t size;
    Py_ssize_t count;                 /* neighbours in the group */
    Py_ssize_t where[MAX_NEIGHBOURS];
    double weights[MAX_NEIGHBOURS];
    double covered;
} Group;

static int offsets_of(const double *weights, Py_ssize_t k, const double *mu, const Group *groups, Py_ssize_t ngroups,
                      double *shift, double *offsets) {
    Sum s = {0.0, 0.0};
    for (Py_ssize_t p = 0; p < k; p++)
        sum_add(&s, weights[p] * mu[p]);
    *shift = sum_value(s);
    for (Py_ssize_t g = 0; g < ngroups; g++) {
        if (!groups[g].live)
            continue;
        Sum t = {0.0, 0.0};
        for (Py_ssize_t j = 0; j < groups[g].count; j++)
            sum_add(&t, groups[g].weights[j] * mu[groups[g].where[j]]);
        offsets[g] = sum_value(t) / groups[g].covered;
    }
    return 1;
}

static inline int beats(double theta, Py_ssize_t i, int have, double chosen_theta, Py_ssize_t chosen) {
    return !have || theta < chosen_theta || (theta == chosen_theta && i < chosen);
}

static int is_tuple_of(PyObject *o, Py_ssize_t size) { return PyTuple_Check(o) && PyTuple_GET_SIZE(o) == size; }

/* every tuple of the plan has the shape regret.plan gives it (so best reads it without checks) */
static int plan_shape_ok(PyObject *contenders, PyObject *fit) {
    if (contenders != Py_None) {
        if (!PyTuple_Check(contenders))
            return 0;
        for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(contenders); c++)
            if (!is_tuple_of(PyTuple_GET_ITEM(contenders, c), 3))
                return 0;
        return 1;
    }
    if (!is_tuple_of(fit, 4) || !PyTuple_Check(PyTuple_GET_ITEM(fit, 2)) || !PyTuple_Check(PyTuple_GET_ITEM(fit, 3)))
        return 0;
    PyObject *complete = PyTuple_GET_ITEM(fit, 2), *groups = PyTuple_GET_ITEM(fit, 3);
    for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(complete); c++)
        if (!is_tuple_of(PyTuple_GET_ITEM(complete, c), 2))
            return 0;
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(groups); g++) {
        PyObject *group = PyTuple_GET_ITEM(groups, g);
        if (!is_tuple_of(group, 4) || !PyTuple_Check(PyTuple_GET_ITEM(group, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(group, 2))
            || !PyTuple_Check(PyTuple_GET_ITEM(group, 3)))
            return 0;
        PyObject *members = PyTuple_GET_ITEM(group, 3);
        for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(members); c++)
            if (!is_tuple_of(PyTuple_GET_ITEM(members, c), 2) || !PyTuple_Check(PyTuple_GET_ITEM(PyTuple_GET_ITEM(members, c), 1)))
                return 0;
    }
    return 1;
}

static PyObject *best(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "best(plan: tuple, weights: list)");
        return NULL;
    }
    PyObject *contenders = PyTuple_GET_ITEM(args[0], 0), *fit = PyTuple_GET_ITEM(args[0], 1);
    if (!plan_shape_ok(contenders, fit)) {
        PyErr_SetString(PyExc_TypeError, "best: the plan is not shaped as regret.plan makes it");
        return NULL;
    }
    PyObject *weight_list = args[1];
    Py_ssize_t k = PyList_GET_SIZE(weight_list);
    if (k > MAX_NEIGHBOURS) {
        PyErr_SetString(PyExc_ValueError, "too many neighbours");
        return NULL;
    }
    double weights[MAX_NEIGHBOURS];
    for (Py_ssize_t p = 0; p < k; p++) {
        PyObject *w = PyList_GET_ITEM(weight_list, p);
        if (!PyFloat_CheckExact(w)) {
            PyErr_SetString(PyExc_TypeError, "weights must be floats");
            return NULL;
        }
        weights[p] = PyFloat_AS_DOUBLE(w);
    }
    int have = 0;
    double chosen_theta = 0.0;
    Py_ssize_t chosen = -1;
    PyObject *chosen_obj = NULL;
    if (contenders != Py_None) {
        Py_ssize_t count = PyTuple_GET_SIZE(contenders);
        if (count == 1) {
            PyObject *index = PyTuple_GET_ITEM(PyTuple_GET_ITEM(contenders, 0), 1);
            Py_INCREF(index);
            return index;
        }
        for (Py_ssize_t c = 0; c < count; c++) {
            PyObject *entry = PyTuple_GET_ITEM(contenders, c);
            double lowest = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 0));
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
            if (have && lowest > chosen_theta + dominated)
                break;
            double theta;
            if (!weighted_sum(weights, k, PyTuple_GET_ITEM(entry, 2), &theta))
                return NULL;
            if (beats(theta, i, have, chosen_theta, chosen)) {
                have = 1;
                chosen = i;
                chosen_theta = theta;
                chosen_obj = PyTuple_GET_ITEM(entry, 1);
            }
        }
        if (PyErr_Occurred())
            return NULL;
        if (!have)
            Py_RETURN_NONE;
        Py_INCREF(chosen_obj);
        return chosen_obj;
    }
    /* fit: (count, column_sums, complete, groups) */
    long count = PyLong_AsLong(PyTuple_GET_ITEM(fit, 0));
    PyObject *column_sums = PySequence_Fast(PyTuple_GET_ITEM(fit, 1), "column sums must be a sequence");
    if (!column_sums)
        return NULL;
    PyObject *complete = PyTuple_GET_ITEM(fit, 2), *group_items = PyTuple_GET_ITEM(fit, 3);
    Py_ssize_t ngroups = PyTuple_GET_SIZE(group_items);
    Group *groups = NULL;
    double *offsets = NULL;
    PyObject *result = NULL;
    if (ngroups > MAX_GROUPS || PySequence_Fast_GET_SIZE(column_sums) != k) {
        PyErr_SetString(PyExc_ValueError, "plan does not match the weights");
        goto done;
    }
    groups = calloc(ngroups ? ngroups : 1, sizeof(Group));
    offsets = calloc(ngroups ? ngroups : 1, sizeof(double));
    if (!groups || !offsets) {
        PyErr_NoMemory();
        goto done;
    }
    /* fit_offsets */
    double sums[MAX_NEIGHBOURS], base[MAX_NEIGHBOURS], mu[MAX_NEIGHBOURS], totals[MAX_NEIGHBOURS];
    long measured[MAX_NEIGHBOURS];
    Sum complete_sum = {0.0, 0.0};
    for (Py_ssize_t p = 0; p < k; p++) {
        sums[p] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(column_sums, p));
        sum_add(&complete_sum, weights[p] * sums[p]);
    }
    double complete_total = sum_value(complete_sum);
    for (Py_ssize_t p = 0; p < k; p++) {
        base[p] = sums[p] - complete_total;
        measured[p] = count;
    }
    for (Py_ssize_t g = 0; g < ngroups; g++) {
        PyObject *group = PyTuple_GET_ITEM(group_items, g);
        PyObject *where = PyTuple_GET_ITEM(group, 0), *member_sums = PyTuple_GET_ITEM(group, 2);
        Group *gr = &groups[g];
        gr->count = PyTuple_GET_SIZE(where);
        gr->size = PyLong_AsSsize_t(PyTuple_GET_ITEM(group, 1));
        if (gr->count > MAX_NEIGHBOURS) {
            PyErr_SetString(PyExc_ValueError, "group too large");
            goto done;
        }
        Sum covered = {0.0, 0.0};
        for (Py_ssize_t j = 0; j < gr->count; j++) {
            gr->where[j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(where, j));
            if (gr->where[j] < 0 || gr->where[j] >= k) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "group neighbour out of range");
                goto done;
            }
            gr->weights[j] = weights[gr->where[j]];
            sum_add(&covered, gr->weights[j]);
        }
        gr->covered = sum_value(covered);
        if (!gr->covered)
            continue;
        gr->live = 1;
        Sum mean = {0.0, 0.0};
        Py_ssize_t pairs = PyTuple_GET_SIZE(member_sums) < gr->count ? PyTuple_GET_SIZE(member_sums) : gr->count;
        for (Py_ssize_t j = 0; j < pairs; j++)
            sum_add(&mean, gr->weights[j] * PyFloat_AsDouble(PyTuple_GET_ITEM(member_sums, j)));
        double group_mean = sum_value(mean) / gr->covered;
        for (Py_ssize_t j = 0; j < pairs; j++) {
            base[gr->where[j]] += PyFloat_AsDouble(PyTuple_GET_ITEM(member_sums, j)) - group_mean;
            measured[gr->where[j]] += gr->size;
        }
    }
    if (PyErr_Occurred())
        goto done;
    for (Py_ssize_t p = 0; p < k; p++)
        mu[p] = measured[p] ? base[p] / (double)measured[p] : 0.0;
    double shift;
    for (long pass = 0; pass < fit_passes - 1; pass++) {
        offsets_of(weights, k, mu, groups, ngroups, &shift, offsets);
        for (Py_ssize_t p = 0; p < k; p++)
            totals[p] = base[p] + (double)count * shift;
        for (Py_ssize_t g = 0; g < ngroups; g++) {
            if (!groups[g].live)
                continue;
            double added = (double)groups[g].size * offsets[g];
            for (Py_ssize_t j = 0; j < groups[g].count; j++)
                totals[groups[g].where[j]] += added;
        }
        for (Py_ssize_t p = 0; p < k; p++)
            mu[p] = measured[p] ? totals[p] / (double)measured[p] : 0.0;
    }
    offsets_of(weights, k, mu, groups, ngroups, &shift, offsets);
    /* the ranking */
    for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(complete); c++) {
        PyObject *entry = PyTuple_GET_ITEM(complete, c);
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
        double theta;
        if (!weighted_sum(weights, k, PyTuple_GET_ITEM(entry, 1), &theta))
            goto done;
        theta = theta - shift;
        if (beats(theta, i, have, chosen_theta, chosen)) {
            have = 1;
            chosen = i;
            chosen_theta = theta;
            chosen_obj = PyTuple_GET_ITEM(entry, 0);
        }
    }
    for (Py_ssize_t g = 0; g < ngroups; g++) {
        if (!groups[g].live)
            continue;
        PyObject *members = PyTuple_GET_ITEM(PyTuple_GET_ITEM(group_items, g), 3);
        for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(members); c++) {
            PyObject *entry = PyTuple_GET_ITEM(members, c);
            Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 0));
            PyObject *values = PyTuple_GET_ITEM(entry, 1);
            /* regret._partial_mean: plain accumulation */
            double total = 0.0, covered = 0.0;
            Py_ssize_t pairs = PyTuple_GET_SIZE(values) < groups[g].count ? PyTuple_GET_SIZE(values) : groups[g].count;
            for (Py_ssize_t j = 0; j < pairs; j++) {
                double weight = weights[groups[g].where[j]];
                total += weight * PyFloat_AsDouble(PyTuple_GET_ITEM(values, j));
                covered += weight;
            }
            double theta = total / covered - offsets[g];
            if (beats(theta, i, have, chosen_theta, chosen)) {
                have = 1;
                chosen = i;
                chosen_theta = theta;
                chosen_obj = PyTuple_GET_ITEM(entry, 0);
            }
        }
    }
    if (PyErr_Occurred())
        goto done;
    if (have) {
        Py_INCREF(chosen_obj);
        result = chosen_obj;
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    Py_DECREF(column_sums);
    free(groups);
    free(offsets);
    return result;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    double new_dominated;
    long new_passes;
    if (!PyArg_ParseTuple(args, "dl", &new_dominated, &new_passes))
        return NULL;
    if (new_passes < 1) {
        PyErr_SetString(PyExc_ValueError, "fit passes must be at least 1");
        return NULL;
    }
    dominated = new_dominated;
    fit_passes = new_passes;
    Py_RETURN_NONE;
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

/* ---- the scaling model's time (predict._Model.time) ------------------------------------------ */
/* One candidate's measured series on every row of a table, as predict._line gives them. */
typedef struct {
    Py_ssize_t count;
    long long *sizes;
    double *times, *log_times, *log_ratios; /* log_ratios[0] unused */
    int has_exponent;
    double exponent;
} Series;

typedef struct {
    Py_ssize_t rows;
    long long *row_ms; /* ascending */
    Series *series;    /* one per row */
    double scale_limit;
} Model;

static const char *MODEL_CAPSULE = "autotuner.lookup._fastrule.model";

static void free_model(Model *model) {
    if (!model)
        return;
    if (model->series)
        for (Py_ssize_t k = 0; k < model->rows; k++) {
            free(model->series[k].sizes);
            free(model->series[k].times);
            free(model->series[k].log_times);
            free(model->series[k].log_ratios);
        }
    free(model->series);
    free(model->row_ms);
    free(model);
}

static void model_destructor(PyObject *capsule) {
    free_model((Model *)PyCapsule_GetPointer(capsule, MODEL_CAPSULE));
}

static int fill_doubles(PyObject *seq, double *out, Py_ssize_t count, int skip_first) {
    for (Py_ssize_t i = skip_first; i < count; i++) {
        out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (out[i] == -1.0 && PyErr_Occurred())
            return 0;
    }
    return 1;
}

/* make_model(row_ms, lines, scale_limit): lines[k] = (sizes, times, log_times, log_ratios, exponent) */
static PyObject *make_model(PyObject *self, PyObject *args) {
    PyObject *row_ms, *lines;
    double scale_limit;
    if (!PyArg_ParseTuple(args, "OOd", &row_ms, &lines, &scale_limit))
        return NULL;
    PyObject *rows_f = PySequence_Fast(row_ms, "row_ms must be a sequence");
    PyObject *lines_f = rows_f ? PySequence_Fast(lines, "lines must be a sequence") : NULL;
    Model *model = calloc(1, sizeof(Model));
    PyObject *capsule = NULL;
    if (!lines_f || !model)
        goto done;
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(rows_f);
    if (PySequence_Fast_GET_SIZE(lines_f) != rows) {
        PyErr_SetString(PyExc_ValueError, "one line per row");
        goto done;
    }
    model->rows = rows;
    model->scale_limit = scale_limit;
    model->row_ms = malloc(sizeof(long long) * (rows ? rows : 1));
    model->series = calloc(rows ? rows : 1, sizeof(Series));
    if (!model->row_ms || !model->series) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < rows; k++) {
        model->row_ms[k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(rows_f, k));
        PyObject *line = PySequence_Fast_GET_ITEM(lines_f, k);
        if (!PyTuple_Check(line) || PyTuple_GET_SIZE(line) != 5) {
            PyErr_SetString(PyExc_TypeError, "a line is (sizes, times, log times, log ratios, exponent)");
            goto done;
        }
        Series *series = &model->series[k];
        PyObject *parts[4] = {NULL, NULL, NULL, NULL};
        int ok = 1;
        for (int j = 0; j < 4 && ok; j++)
            ok = (parts[j] = PySequence_Fast(PyTuple_GET_ITEM(line, j), "a line's parts must be sequences")) != NULL;
        Py_ssize_t count = ok ? PySequence_Fast_GET_SIZE(parts[0]) : 0;
        if (ok) {
            series->count = count;
            series->sizes = malloc(sizeof(long long) * (count ? count : 1));
            series->times = malloc(sizeof(double) * (count ? count : 1));
            series->log_times = malloc(sizeof(double) * (count ? count : 1));
            series->log_ratios = calloc(count ? count : 1, sizeof(double));
            ok = series->sizes && series->times && series->log_times && series->log_ratios;
            if (!ok)
                PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; ok && i < count; i++)
            series->sizes[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(parts[0], i));
        ok = ok && !PyErr_Occurred() && fill_doubles(parts[1], series->times, count, 0)
             && fill_doubles(parts[2], series->log_times, count, 0) && fill_doubles(parts[3], series->log_ratios, count, 1);
        for (int j = 0; j < 4; j++)
            Py_XDECREF(parts[j]);
        if (!ok)
            goto done;
        PyObject *exponent = PyTuple_GET_ITEM(line, 4);
        series->has_exponent = exponent != Py_None;
        if (series->has_exponent && (series->exponent = PyFloat_AsDouble(exponent)) == -1.0 && PyErr_Occurred())
            goto done;
    }
    capsule = PyCapsule_New(model, MODEL_CAPSULE, model_destructor);
    if (capsule)
        model = NULL;
done:
    Py_XDECREF(rows_f);
    Py_XDECREF(lines_f);
    free_model(model);
    return capsule;
}

static Py_ssize_t bisect_left_ll(const long long *values, Py_ssize_t count, long long x) {
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

/* x ** y for floats, as Python's float power computes it for a positive base */
static inline double py_pow(double x, double y) { return y == 0.0 || x == 1.0 ? 1.0 : pow(x, y); }

/* predict._Model._at: the candidate's time at n on row k; returns 0 for none */
static int series_at(const Model *model, Py_ssize_t k, long long n, double *out) {
    const Series *s = &model->series[k];
    if (s->count == 0 || n < s->sizes[0])
        return 0;
    Py_ssize_t upper = bisect_left_ll(s->sizes, s->count, n);
    if (upper < s->count) {
        if (upper == 0 || s->sizes[upper] == n) {
            *out = s->times[upper];
            return 1;
        }
        double weight = log((double)n / (double)s->sizes[upper - 1]) / s->log_ratios[upper];
        *out = exp((1.0 - weight) * s->log_times[upper - 1] + weight * s->log_times[upper]);
        return 1;
    }
    double last_time = s->times[s->count - 1];
    double last_size = (double)s->sizes[s->count - 1];
    if (!s->has_exponent) {
        *out = last_time * (double)n / last_size;
        return 1;
    }
    if (s->exponent > model->scale_limit)
        return 0;
    *out = last_time * py_pow((double)n / last_size, 0.0 > s->exponent ? 0.0 : s->exponent);
    return 1;
}

/* model_time(model, m, n, copy_rate): predict._Model.time; None where the model has no time */
static PyObject *model_time(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "model_time(model, m, n, copy_rate)");
        return NULL;
    }
    const Model *model = (const Model *)PyCapsule_GetPointer(args[0], MODEL_CAPSULE);
    if (!model)
        return NULL;
    long long m = PyLong_AsLongLong(args[1]), n = PyLong_AsLongLong(args[2]);
    double copy_rate = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred())
        return NULL;
    long long x = m > 1 ? m : 1;
    const long long *rows = model->row_ms;
    Py_ssize_t count = model->rows, start = bisect_left_ll(rows, count, x), hi_k = -1;
    double above = 0.0, time, t_lo = 0.0;
    for (Py_ssize_t k = start; k < count; k++)
        if (series_at(model, k, n, &above)) {
            hi_k = k;
            break;
        }
    if (hi_k >= 0 && rows[hi_k] == x) {
        time = above;
    } else {
        Py_ssize_t below = start - 1;
        while (below >= 0 && !series_at(model, below, n, &t_lo))
            below--;
        if (below < 0)
            Py_RETURN_NONE;
        if (hi_k >= 0) {
            double lo = (double)rows[below], hi = (double)rows[hi_k];
            double weight = log((double)x / lo) / log(hi / lo);
            time = exp((1.0 - weight) * log(t_lo) + weight * log(above));
        } else { /* past the largest row with a time: from it and the nearest row a factor 2 below */
            long long last_m = rows[below];
            double last_t = t_lo, second_t = 0.0, previous_t = 0.0, t;
            long long second_m = 0, previous_m = 0;
            int have_second = 0, have_previous = 0;
            for (Py_ssize_t k = below - 1; k >= 0; k--) {
                if (!series_at(model, k, n, &t))
                    continue;
                if (!have_previous) {
                    have_previous = 1;
                    previous_m = rows[k];
                    previous_t = t;
                }
                if (rows[k] * 2 <= last_m) {
                    have_second = 1;
                    second_m = rows[k];
                    second_t = t;
                    break;
                }
            }
            if (!have_second && have_previous) {
                have_second = 1;
                second_m = previous_m;
                second_t = previous_t;
            }
            if (!have_second) { /* predict.scaled over one size: the work's scaling */
                time = last_t * (double)x / (double)last_m;
            } else {
                double exponent = log(last_t / second_t) / log((double)last_m / (double)second_m);
                if (exponent > model->scale_limit)
                    Py_RETURN_NONE;
                time = last_t * py_pow((double)x / (double)last_m, 0.0 > exponent ? 0.0 : exponent);
            }
        }
    }
    double floor = 0.0;
    if (copy_rate && m <= 0x7fffffffLL && n <= 0x7fffffffLL) {
        floor = (double)(2 * m * n) / copy_rate; /* exact below 2**63, rounded once as Python rounds it */
    } else if (copy_rate) { /* larger than any valid shape: Python's own arithmetic */
        PyObject *work = PyNumber_Multiply(args[1], args[2]), *twice = work ? PyNumber_Add(work, work) : NULL;
        double bytes = twice ? PyLong_AsDouble(twice) : -1.0;
        Py_XDECREF(work);
        Py_XDECREF(twice);
        if (bytes == -1.0 && PyErr_Occurred())
            return NULL;
        floor = bytes / copy_rate;
    }
    return PyFloat_FromDouble(floor > time ? floor : time);
}

static PyMethodDef methods[] = {
    {"make_layout", make_layout, METH_VARARGS, "make_layout(row_keys, rows, row_reach, col_keys, cols, col_reach)"},
    {"stencil", (PyCFunction)(void (*)(void))stencil, METH_FASTCALL, "stencil(layout, m, n, clamped)"},
    {"best", (PyCFunction)(void (*)(void))best, METH_FASTCALL, "best(plan, weights)"},
    {"configure", configure, METH_VARARGS, "configure(dominated, fit_passes)"},
    {"nearest", (PyCFunction)(void (*)(void))nearest, METH_FASTCALL, "nearest(logs, log_m, log_n)"},
    {"make_model", make_model, METH_VARARGS, "make_model(row_ms, lines, scale_limit)"},
    {"model_time", (PyCFunction)(void (*)(void))model_time, METH_FASTCALL, "model_time(model, m, n, copy_rate)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastrule", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastrule(void) { return PyModule_Create(&module); }
