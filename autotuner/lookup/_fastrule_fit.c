/* The compiled lookup rule, part 2: regret.best (with fit_offsets) and regret.plan, float for float
 * (see _fastrule.c for the contract). */
#include "_fastrule.h"

/* ---- best and fit_offsets ------------------------------------------------------------------- */
static double dominated = 1e-9; /* regret._DOMINATED */
static long fit_passes = 2;     /* regret.FIT_PASSES */

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

PyObject *fastrule_best(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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

PyObject *fastrule_configure(PyObject *self, PyObject *args) {
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

/* ---- plan: regret.plan ---------------------------------------------------------------------- */
typedef struct {
    Py_ssize_t ival;    /* the candidate's index */
    PyObject *i;        /* the same, the object of allowed (borrowed) */
    PyObject *values;   /* new reference: its log regrets (all neighbours, or those of its group) */
    double low, high;   /* min and max of values */
    PyObject *low_obj;  /* the first minimal float of values (borrowed from values) */
} Member;

typedef struct {
    unsigned long long mask; /* the neighbours it was measured at */
    Py_ssize_t count;
    Member *members;
} Pattern;

static void members_range(Member *member) {
    Py_ssize_t count = PyTuple_GET_SIZE(member->values);
    member->low_obj = NULL;
    for (Py_ssize_t j = 0; j < count; j++) {
        PyObject *value = PyTuple_GET_ITEM(member->values, j);
        double x = PyFloat_AS_DOUBLE(value);
        if (j == 0 || x > member->high)
            member->high = x;
        if (j == 0 || x < member->low) {
            member->low = x;
            member->low_obj = value;
        }
    }
}

/* regret._undominated over members (each with its low and high worked out) */
static PyObject *undominated(const Member *members, Py_ssize_t count) {
    if (count == 0)
        return PyTuple_New(0);
    double ceiling = members[0].high;
    for (Py_ssize_t k = 1; k < count; k++)
        if (members[k].high < ceiling)
            ceiling = members[k].high;
    ceiling = ceiling + dominated;
    PyObject *kept = PyList_New(0);
    if (!kept)
        return NULL;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (!(members[k].low <= ceiling))
            continue;
        PyObject *entry = PyTuple_Pack(2, members[k].i, members[k].values);
        if (!entry || PyList_Append(kept, entry) < 0) {
            Py_XDECREF(entry);
            Py_DECREF(kept);
            return NULL;
        }
        Py_DECREF(entry);
    }
    PyObject *result = PyList_AsTuple(kept);
    Py_DECREF(kept);
    return result;
}

/* sum(column) for each position of the members' values (regret._sums / _column_sums) */
static int column_sums(const Member *members, Py_ssize_t count, Py_ssize_t width, double *out) {
    for (Py_ssize_t p = 0; p < width; p++) {
        Sum total = {0.0, 0.0};
        for (Py_ssize_t k = 0; k < count; k++)
            sum_add(&total, PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(members[k].values, p)));
        out[p] = sum_value(total);
    }
    return 1;
}

/* sorted((min(values), i, values)): by smallest log regret, then index (indexes are distinct) */
static int contender_less(const void *a, const void *b) {
    const Member *x = *(Member *const *)a, *y = *(Member *const *)b;
    if (x->low != y->low)
        return x->low < y->low ? -1 : 1;
    return x->ival < y->ival ? -1 : (x->ival > y->ival);
}

PyObject *fastrule_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "plan(log_regrets, gaps, allowed)");
        return NULL;
    }
    PyObject *rows = PySequence_Fast(args[0], "log regrets must be a sequence of tuples");
    PyObject *allowed = rows ? PySequence_Fast(args[2], "allowed must be a sequence") : NULL;
    PyObject *gaps = args[1], *result = NULL, *sums = NULL, *groups = NULL, *kept = NULL;
    Member *complete = NULL;
    Pattern *patterns = NULL;
    Py_ssize_t ncomplete = 0, npatterns = 0, nallowed = 0, nrows = 0;
    PyObject *row_of[MAX_NEIGHBOURS];
    if (!allowed)
        goto done;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(rows), candidates = PY_SSIZE_T_MAX;
    if (k > MAX_NEIGHBOURS) {
        PyErr_SetString(PyExc_ValueError, "too many neighbours");
        goto done;
    }
    for (Py_ssize_t p = 0; p < k; p++) { /* each row as a tuple or list (a tuple is not copied) */
        row_of[p] = PySequence_Fast(PySequence_Fast_GET_ITEM(rows, p), "log regrets must be sequences");
        if (!row_of[p])
            goto done;
        nrows = p + 1;
        if (PySequence_Fast_GET_SIZE(row_of[p]) < candidates)
            candidates = PySequence_Fast_GET_SIZE(row_of[p]);
    }
    if (k == 0)
        candidates = 0; /* zip() of no rows: no columns */
    nallowed = PySequence_Fast_GET_SIZE(allowed);
    complete = calloc(nallowed ? nallowed : 1, sizeof(Member));
    patterns = calloc(nallowed ? nallowed : 1, sizeof(Pattern));
    if (!complete || !patterns) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t a = 0; a < nallowed; a++) {
        PyObject *i_obj = PySequence_Fast_GET_ITEM(allowed, a);
        Py_ssize_t i = PyLong_AsSsize_t(i_obj);
        if (i == -1 && PyErr_Occurred())
            goto done;
        if (i < 0 || i >= candidates) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            goto done;
        }
        unsigned long long mask = 0;
        Py_ssize_t measured = 0;
        for (Py_ssize_t p = 0; p < k; p++) {
            PyObject *value = PySequence_Fast_GET_ITEM(row_of[p], i);
            if (value == Py_None)
                continue;
            if (!PyFloat_CheckExact(value)) {
                PyErr_SetString(PyExc_TypeError, "log regrets must be floats or None");
                goto done;
            }
            mask |= 1ULL << p;
            measured++;
        }
        if (measured == k) { /* complete */
            PyObject *values = PyTuple_New(k);
            if (!values)
                goto done;
            for (Py_ssize_t p = 0; p < k; p++) {
                PyObject *value = PySequence_Fast_GET_ITEM(row_of[p], i);
                Py_INCREF(value);
                PyTuple_SET_ITEM(values, p, value);
            }
            Member *member = &complete[ncomplete++];
            member->ival = i;
            member->i = i_obj;
            member->values = values;
            if (k)
                members_range(member);
            continue;
        }
        int in_gaps = PySequence_Contains(gaps, i_obj);
        if (in_gaps < 0)
            goto done;
        if (in_gaps || mask == 0)
            continue;
        Py_ssize_t g = 0;
        while (g < npatterns && patterns[g].mask != mask)
            g++;
        if (g == npatterns) {
            patterns[g].mask = mask;
            patterns[g].members = calloc(nallowed, sizeof(Member));
            if (!patterns[g].members) {
                PyErr_NoMemory();
                goto done;
            }
            npatterns++;
        }
        PyObject *values = PyTuple_New(measured);
        if (!values)
            goto done;
        for (Py_ssize_t p = 0, j = 0; p < k; p++) {
            if (!(mask >> p & 1))
                continue;
            PyObject *value = PySequence_Fast_GET_ITEM(row_of[p], i);
            Py_INCREF(value);
            PyTuple_SET_ITEM(values, j++, value);
        }
        Member *member = &patterns[g].members[patterns[g].count++];
        member->ival = i;
        member->i = i_obj;
        member->values = values;
        members_range(member);
    }
    if (npatterns == 0) { /* the weighted means alone decide: contenders sorted by smallest log regret */
        if (ncomplete == 0) {
            result = Py_BuildValue("(()O)", Py_None);
            goto done;
        }
        double ceiling = complete[0].high;
        for (Py_ssize_t c = 1; c < ncomplete; c++)
            if (complete[c].high < ceiling)
                ceiling = complete[c].high;
        ceiling = ceiling + dominated;
        Member **order = malloc(sizeof(Member *) * ncomplete);
        if (!order) {
            PyErr_NoMemory();
            goto done;
        }
        Py_ssize_t count = 0;
        for (Py_ssize_t c = 0; c < ncomplete; c++)
            if (complete[c].low <= ceiling)
                order[count++] = &complete[c];
        qsort(order, count, sizeof(Member *), contender_less);
        kept = PyTuple_New(count);
        for (Py_ssize_t c = 0; kept && c < count; c++) {
            PyObject *entry = PyTuple_Pack(3, order[c]->low_obj, order[c]->i, order[c]->values);
            if (!entry) {
                Py_CLEAR(kept);
                break;
            }
            PyTuple_SET_ITEM(kept, c, entry);
        }
        free(order);
        if (kept)
            result = PyTuple_Pack(2, kept, Py_None);
        goto done;
    }
    double column[MAX_NEIGHBOURS];
    sums = PyList_New(k);
    if (!sums)
        goto done;
    if (ncomplete)
        column_sums(complete, ncomplete, k, column);
    for (Py_ssize_t p = 0; p < k; p++) {
        PyObject *value = PyFloat_FromDouble(ncomplete ? column[p] : 0.0);
        if (!value)
            goto done;
        PyList_SET_ITEM(sums, p, value);
    }
    groups = PyTuple_New(npatterns);
    if (!groups)
        goto done;
    for (Py_ssize_t g = 0; g < npatterns; g++) {
        Pattern *pattern = &patterns[g];
        Py_ssize_t width = PyTuple_GET_SIZE(pattern->members[0].values);
        PyObject *where = PyTuple_New(width), *member_sums = PyTuple_New(width);
        PyObject *contenders = undominated(pattern->members, pattern->count);
        PyObject *size = PyLong_FromSsize_t(pattern->count);
        int ok = where && member_sums && contenders && size;
        if (ok) {
            column_sums(pattern->members, pattern->count, width, column);
            for (Py_ssize_t p = 0, j = 0; p < k && ok; p++) {
                if (!(pattern->mask >> p & 1))
                    continue;
                PyObject *position = PyLong_FromSsize_t(p), *total = PyFloat_FromDouble(column[j]);
                ok = position && total;
                if (ok) {
                    PyTuple_SET_ITEM(where, j, position);
                    PyTuple_SET_ITEM(member_sums, j, total);
                } else {
                    Py_XDECREF(position);
                    Py_XDECREF(total);
                }
                j++;
            }
        }
        PyObject *group = ok ? PyTuple_Pack(4, where, size, member_sums, contenders) : NULL;
        Py_XDECREF(where);
        Py_XDECREF(member_sums);
        Py_XDECREF(contenders);
        Py_XDECREF(size);
        if (!group)
            goto done;
        PyTuple_SET_ITEM(groups, g, group);
    }
    kept = undominated(complete, ncomplete);
    if (!kept)
        goto done;
    result = Py_BuildValue("(O(nOOO))", Py_None, ncomplete, sums, kept, groups);
done:
    if (complete)
        for (Py_ssize_t c = 0; c < nallowed; c++)
            Py_XDECREF(complete[c].values);
    if (patterns)
        for (Py_ssize_t g = 0; g < npatterns; g++) {
            for (Py_ssize_t c = 0; c < patterns[g].count; c++)
                Py_XDECREF(patterns[g].members[c].values);
            free(patterns[g].members);
        }
    free(complete);
    free(patterns);
    Py_XDECREF(sums);
    Py_XDECREF(groups);
    Py_XDECREF(kept);
    for (Py_ssize_t p = 0; p < nrows; p++)
        Py_DECREF(row_of[p]);
    Py_XDECREF(rows);
    Py_XDECREF(allowed);
    return result;
}
