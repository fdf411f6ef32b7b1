/* The compiled lookup rule, part 3: the scaling model's time, predict._Model.time, float for float
 * (see _fastrule.c for the contract). */
#include "_fastrule.h"

/* ---- the scaling model's time (predict._Model.time) ------------------------------------------ */
/* One candidate's measured series on every row of a table, as predict._line gives them. */
typedef struct {
    Py_ssize_t count;
    long long *sizes;
    double *times, *log_times, *log_ratios; /* log_ratios[0] unused */
    int has_exponent;
    double exponent;
    double reach; /* the largest size the series is extrapolated to (inf: no bound) */
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

/* make_model(row_ms, lines, scale_limit): lines[k] = (sizes, times, log_times, log_ratios, exponent, reach) */
PyObject *fastrule_make_model(PyObject *self, PyObject *args) {
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
        if (!PyTuple_Check(line) || PyTuple_GET_SIZE(line) != 6) {
            PyErr_SetString(PyExc_TypeError, "a line is (sizes, times, log times, log ratios, exponent, reach)");
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
        if ((series->reach = PyFloat_AsDouble(PyTuple_GET_ITEM(line, 5))) == -1.0 && PyErr_Occurred())
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
    if ((double)n > s->reach) /* far past this row's end, while other rows measured further */
        return 0;
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
PyObject *fastrule_model_time(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
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
