/* Two hot loops of the report in C, each the exact twin of a Python function that runs
   where this module is not built (it is optional: no C compiler, no module).

   span_rows: the inner loop of report._otlp_typed._rows. It reads the structs msgspec decoded a trace-file line into (their fields by the offsets
   of their member descriptors, after checking each object's exact type) and appends a row
   per span to a list, exactly as the Python loop does; everything it does not do itself
   (an id not seen before in the line, a number that is not a plain string or float, a span
   whose other attributes are read) it hands to the Python functions given to configure(),
   so both loops give the same rows and fail the same lines. Any exception means: hand the
   line to the general reader.

   sequential_children: _accounting.span_tree.sequential_children for records whose ids
   and times are plain 64-bit integers; anything else answers NotImplemented and the
   Python function decides. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyTypeObject *span, *kv, *value, *array;
    Py_ssize_t trace_id, span_id, parent, name, start, end, attributes;
    Py_ssize_t key, val;
    Py_ssize_t string, integer, dbl, boolean, items, values;
    PyObject *unset, *phase_key, *whole_keys;
    PyObject *trace_miss, *parent_miss, *check_value, *phase_value, *whole_span, *attr_value;
    PyObject *names; /* str -> the one object of that text kept (see shared()) */
    int ready;
} State;

static State st;

#define FIELD(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int
offset_of(PyTypeObject *tp, const char *name, Py_ssize_t *out)
{
    PyObject *d = PyDict_GetItemString(tp->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", tp->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX && m->type != T_OBJECT) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", tp->tp_name, name);
        return -1;
    }
    *out = m->offset;
    return 0;
}

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *span, *kv, *value, *array;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OOOOOOOOOO!", &PyType_Type, &span, &PyType_Type, &kv,
                          &PyType_Type, &value, &PyType_Type, &array, &st.unset, &st.phase_key, &st.whole_keys,
                          &st.trace_miss, &st.parent_miss, &st.check_value, &st.phase_value,
                          &st.whole_span, &st.attr_value, &PyDict_Type, &st.names))
        return NULL;
    if (!PyUnicode_CheckExact(st.phase_key) || !PyFrozenSet_CheckExact(st.whole_keys)) {
        PyErr_SetString(PyExc_TypeError, "phase key: str, whole keys: frozenset");
        return NULL;
    }
    st.span = (PyTypeObject *)span;
    st.kv = (PyTypeObject *)kv;
    st.value = (PyTypeObject *)value;
    st.array = (PyTypeObject *)array;
    if (offset_of(st.span, "traceId", &st.trace_id) || offset_of(st.span, "spanId", &st.span_id)
        || offset_of(st.span, "parentSpanId", &st.parent) || offset_of(st.span, "name", &st.name)
        || offset_of(st.span, "startTimeUnixNano", &st.start)
        || offset_of(st.span, "endTimeUnixNano", &st.end)
        || offset_of(st.span, "attributes", &st.attributes) || offset_of(st.kv, "key", &st.key)
        || offset_of(st.kv, "value", &st.val) || offset_of(st.value, "stringValue", &st.string)
        || offset_of(st.value, "intValue", &st.integer)
        || offset_of(st.value, "doubleValue", &st.dbl)
        || offset_of(st.value, "boolValue", &st.boolean)
        || offset_of(st.value, "arrayValue", &st.items)
        || offset_of(st.array, "values", &st.values))
        return NULL;
    /* held for the life of the process: the module keeps what it reads with */
    Py_INCREF(span); Py_INCREF(kv); Py_INCREF(value); Py_INCREF(array);
    Py_INCREF(st.unset); Py_INCREF(st.phase_key); Py_INCREF(st.whole_keys);
    Py_INCREF(st.trace_miss); Py_INCREF(st.parent_miss); Py_INCREF(st.check_value);
    Py_INCREF(st.phase_value); Py_INCREF(st.whole_span); Py_INCREF(st.attr_value);
    Py_INCREF(st.names);
    st.ready = 1;
    Py_RETURN_NONE;
}

/* Names kept past their line (phases, a root's attribute keys) as one object per text: the
   constants given to configure_rows() for the known ones, else the first one read, up to
   MAX_NAMES texts (a bound, not interning: odd input cannot grow it for ever). Lookups
   with the constants then find them by identity, and the held rows and spans share them
   rather than hold a copy each that has left the cache when they are read again. *p is
   replaced by a new reference to the shared object; 0, or -1 with an exception. */
#define MAX_NAMES 4096
static int
shared(PyObject **p)
{
    PyObject *got = PyDict_GetItemWithError(st.names, *p);
    if (got != NULL) {
        Py_INCREF(got);
        Py_SETREF(*p, got);
        return 0;
    }
    if (PyErr_Occurred())
        return -1;
    if (PyDict_GET_SIZE(st.names) < MAX_NAMES && PyDict_SetItem(st.names, *p, *p) < 0)
        return -1;
    return 0;
}

/* a field, checked present (a slot never set reads NULL) */
static inline PyObject *
field(PyObject *obj, Py_ssize_t off)
{
    PyObject *v = FIELD(obj, off);
    if (v == NULL)
        PyErr_SetString(PyExc_ValueError, "a field without a value");
    return v;
}

/* whether a str is 1 to 19 ASCII digits (int() takes it whatever its limits) */
static int
digits_only(PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n == 0 || n > 19 || PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND)
        return 0;
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return 1;
}

/* ``int(s)`` of a str: up to 19 ASCII digits here (a nanosecond time), else int()'s own
   parser (signs, spaces, underscores, other digits, big numbers, errors) */
static PyObject *
int_of(PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n > 0 && n <= 19 && PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = PyUnicode_1BYTE_DATA(s);
        unsigned long long v = 0; /* 19 digits fit: below 2**64 */
        Py_ssize_t i = 0;
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
            v = v * 10 + (p[i] - '0');
        if (i == n)
            return PyLong_FromUnsignedLongLong(v);
    }
    return PyLong_FromUnicodeObject(s, 10);
}

/* ``int(x or 0)``: None, "" and 0 are 0; a str goes through int_of */
static PyObject *
as_int(PyObject *x)
{
    if (x == Py_None)
        return PyLong_FromLong(0);
    if (PyLong_CheckExact(x)) {
        Py_INCREF(x);
        return x;
    }
    if (PyUnicode_CheckExact(x)) {
        if (PyUnicode_GET_LENGTH(x) == 0)
            return PyLong_FromLong(0);
        return int_of(x);
    }
    return PyNumber_Long(x);
}

/* a value from the cache, or from ``miss(raw)`` (then cached); a new reference */
static PyObject *
cached(PyObject *cache, PyObject *raw, PyObject *miss)
{
    PyObject *got = PyDict_GetItemWithError(cache, raw);
    if (got != NULL) {
        Py_INCREF(got);
        return got;
    }
    if (PyErr_Occurred())
        return NULL;
    got = PyObject_CallOneArg(miss, raw);
    if (got == NULL || PyDict_SetItem(cache, raw, got) < 0) {
        Py_XDECREF(got);
        return NULL;
    }
    return got;
}

static int
hex_digit(Py_UCS1 c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* a span id: exactly 16 hex digits (what fromhex and the length checks let through) */
static PyObject *
span_id_of(PyObject *s)
{
    if (!PyUnicode_CheckExact(s) || PyUnicode_GET_LENGTH(s) != 16
        || PyUnicode_KIND(s) != PyUnicode_1BYTE_KIND) {
        PyErr_SetString(PyExc_ValueError, "not a span id");
        return NULL;
    }
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(s);
    unsigned long long id = 0;
    for (int i = 0; i < 16; i++) {
        int d = hex_digit(p[i]);
        if (d < 0) {
            PyErr_SetString(PyExc_ValueError, "not a span id");
            return NULL;
        }
        id = (id << 4) | (unsigned long long)d;
    }
    return PyLong_FromUnsignedLongLong(id);
}

/* An attribute's key and value (borrowed), its type checked; 0, or -1 with an exception. */
static int
key_value(PyObject *kv, PyObject **key, PyObject **v)
{
    if (!Py_IS_TYPE(kv, st.kv)) {
        PyErr_SetString(PyExc_TypeError, "not an attribute");
        return -1;
    }
    *key = field(kv, st.key);
    *v = field(kv, st.val);
    return *key == NULL || *v == NULL ? -1 : 0;
}

/* Checks an attribute's value as the Python loop does; 0, or -1 with an exception. */
static int
check_value(PyObject *v)
{
    if (!Py_IS_TYPE(v, st.value)) {
        PyErr_SetString(PyExc_TypeError, "not an attribute value");
        return -1;
    }
    PyObject *text = field(v, st.string);
    if (text == NULL)
        return -1;
    if (text != st.unset)
        return 0;
    PyObject *number = field(v, st.integer);
    if (number == NULL)
        return -1;
    if (number == st.unset) {
        PyObject *d = field(v, st.dbl);
        if (d == NULL)
            return -1;
        if (PyFloat_CheckExact(d))  /* a JSON number: no check */
            return 0;
        if (d == st.unset) {
            PyObject *b = field(v, st.boolean), *a = field(v, st.items);
            if (b == NULL || a == NULL)
                return -1;
            if (b != st.unset || a == st.unset)  /* a bool, or no value: nothing to fail */
                return 0;
            if (Py_IS_TYPE(a, st.array)) {  /* each item as _value() reads it */
                PyObject *items = field(a, st.values);
                if (items == NULL)
                    return -1;
                if (PyList_CheckExact(items)) {
                    if (Py_EnterRecursiveCall(" in an attribute array"))
                        return -1;
                    int failed = 0;
                    for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(items); i++)
                        failed = check_value(PyList_GET_ITEM(items, i));
                    Py_LeaveRecursiveCall();
                    return failed;
                }
            }
        }
        PyObject *r = PyObject_CallOneArg(st.check_value, v);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    if (PyUnicode_CheckExact(number)) {
        if (digits_only(number))  /* int() takes it: no need to make it */
            return 0;
        PyObject *r = PyLong_FromUnicodeObject(number, 10);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    return 0;
}

/* The row of one span (a new reference), or NULL with an exception. */
static PyObject *
row_of(PyObject *sp, PyObject *traces, PyObject *parents, PyObject *service, PyObject *run)
{
    PyObject *trace_id = NULL, *span_id = NULL, *parent_id = NULL, *start = NULL;
    PyObject *end = NULL, *phase = NULL, *whole = NULL, *row = NULL;
    if (!Py_IS_TYPE(sp, st.span)) {
        PyErr_SetString(PyExc_TypeError, "not a span");
        return NULL;
    }
    PyObject *raw_parent = field(sp, st.parent), *raw_trace = field(sp, st.trace_id);
    PyObject *raw_span = field(sp, st.span_id), *name = field(sp, st.name);
    PyObject *raw_start = field(sp, st.start), *raw_end = field(sp, st.end);
    PyObject *attributes = field(sp, st.attributes);
    if (!raw_parent || !raw_trace || !raw_span || !name || !raw_start || !raw_end || !attributes)
        return NULL;
    if ((parent_id = cached(parents, raw_parent, st.parent_miss)) == NULL
        || (trace_id = cached(traces, raw_trace, st.trace_miss)) == NULL
        || (span_id = span_id_of(raw_span)) == NULL || (end = as_int(raw_end)) == NULL
        || (start = as_int(raw_start)) == NULL)
        goto done;
    int zero = PyObject_Not(end);
    if (zero < 0)
        goto done;
    if (zero) {
        Py_DECREF(end);
        end = Py_NewRef(Py_None);
    }
    PyObject *found = NULL; /* the phase attribute's value (the last of a repeated key) */
    int read_all = 0;
    if (attributes != Py_None) {
        if (!PyList_CheckExact(attributes)) {
            PyErr_SetString(PyExc_TypeError, "attributes: not a list");
            goto done;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(attributes); i++) {
            PyObject *key, *v;
            if (key_value(PyList_GET_ITEM(attributes, i), &key, &v) < 0)
                goto done;
            int is_phase = key == st.phase_key;
            if (!is_phase) {
                is_phase = PyUnicode_Compare(key, st.phase_key) == 0;
                if (!is_phase && PyErr_Occurred())
                    goto done;
            }
            if (is_phase)
                found = v;
            else if (!read_all) {
                int in = PySet_Contains(st.whole_keys, key);
                if (in < 0)
                    goto done;
                read_all = in;
            }
            if (v != st.unset && check_value(v) < 0)
                goto done;
        }
    }
    if (read_all) {
        PyObject *call[] = {sp, trace_id, span_id, parent_id, service, run};
        whole = PyObject_Vectorcall(st.whole_span, call, 6, NULL);
        if (whole == NULL)
            goto done;
    }
    if (found == NULL || found == st.unset)
        phase = Py_NewRef(Py_None);
    else {
        PyObject *text = field(found, st.string);
        if (text == NULL)
            goto done;
        phase = text != st.unset ? Py_NewRef(text) : PyObject_CallOneArg(st.phase_value, found);
        if (phase == NULL)
            goto done;
        if (PyUnicode_CheckExact(phase) && shared(&phase) < 0) /* held for the window */
            goto done;
    }
    row = PyTuple_New(8);
    if (row == NULL)
        goto done;
    PyTuple_SET_ITEM(row, 0, trace_id);
    PyTuple_SET_ITEM(row, 1, span_id);
    PyTuple_SET_ITEM(row, 2, parent_id);
    PyTuple_SET_ITEM(row, 3, name == st.unset ? PyUnicode_New(0, 0) : Py_NewRef(name));
    PyTuple_SET_ITEM(row, 4, start);
    PyTuple_SET_ITEM(row, 5, end);
    PyTuple_SET_ITEM(row, 6, phase);
    PyTuple_SET_ITEM(row, 7, whole != NULL ? whole : Py_NewRef(Py_None));
    if (whole == NULL)
        PyObject_GC_UnTrack(row); /* strs, ints and None: nothing for the collector */
    return row;
done:
    Py_XDECREF(trace_id);
    Py_XDECREF(span_id);
    Py_XDECREF(parent_id);
    Py_XDECREF(start);
    Py_XDECREF(end);
    Py_XDECREF(phase);
    Py_XDECREF(whole);
    return NULL;
}

static PyObject *
span_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "span_rows(spans, out, traces, parents, service, run)");
        return NULL;
    }
    if (!st.ready) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    PyObject *spans = args[0], *out = args[1], *traces = args[2], *parents = args[3];
    if (!PyList_CheckExact(spans) || !PyList_CheckExact(out) || !PyDict_CheckExact(traces)
        || !PyDict_CheckExact(parents)) {
        PyErr_SetString(PyExc_TypeError, "span_rows: lists and dicts");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(spans); i++) {
        PyObject *row = row_of(PyList_GET_ITEM(spans, i), traces, parents, args[4], args[5]);
        if (row == NULL)
            return NULL;
        int failed = PyList_Append(out, row);
        Py_DECREF(row);
        if (failed)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* sequential_children(root_id, start, end, spans, bands, PhaseInterval, array) */
static PyObject *
sequential_children(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "sequential_children takes 7 arguments");
        return NULL;
    }
    PyObject *spans = args[3], *bands = args[4], *array_type = args[6];
    PyTypeObject *interval = (PyTypeObject *)args[5];
    if (!PyType_Check(args[5]) || !PyType_IsSubtype(interval, &PyTuple_Type)
        || !PyTuple_CheckExact(bands)
        || !(PyList_CheckExact(spans) || PyTuple_CheckExact(spans)))
        Py_RETURN_NOTIMPLEMENTED;
    unsigned long long root = PyLong_AsUnsignedLongLong(args[0]);
    long long start_ns = PyLong_AsLongLong(args[1]), end_ns = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred() || start_ns < 0 || end_ns < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(spans), nbands = PyTuple_GET_SIZE(bands);
    for (Py_ssize_t b = 0; b < nbands; b++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(bands, b)))
            Py_RETURN_NOTIMPLEMENTED;
    PyObject **items = PySequence_Fast_ITEMS(spans);
    long long sums[8] = {0};
    if (nbands > 8)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *out = PyList_New(0), *flat = NULL, *result = NULL;
    long long *f = PyMem_Malloc((size_t)(n * 3 + 1) * sizeof(long long));
    if (out == NULL || f == NULL) {
        if (f == NULL)
            PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t k = 0;
    long long last = start_ns;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = items[i];
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 5)
            goto python;
        PyObject *span_id = PyTuple_GET_ITEM(rec, 0), *parent = PyTuple_GET_ITEM(rec, 1);
        PyObject *start = PyTuple_GET_ITEM(rec, 2), *end = PyTuple_GET_ITEM(rec, 3);
        PyObject *phase = PyTuple_GET_ITEM(rec, 4);
        if (phase == Py_None || parent == Py_None)
            continue;
        if (!PyLong_CheckExact(span_id) || !PyLong_CheckExact(parent)
            || !PyUnicode_CheckExact(phase))
            goto python;
        unsigned long long sid = PyLong_AsUnsignedLongLong(span_id);
        unsigned long long pid = PyLong_AsUnsignedLongLong(parent);
        if (PyErr_Occurred())
            goto python;
        if (sid == root)
            continue;
        if (pid != root || end == Py_None)
            goto none;
        if (!PyLong_CheckExact(start) || !PyLong_CheckExact(end))
            goto python;
        long long s = PyLong_AsLongLong(start), e = PyLong_AsLongLong(end);
        if (PyErr_Occurred() || s < 0 || e < 0)
            goto python;
        if (s < last || e <= s)
            goto none;
        Py_ssize_t c = 0; /* the band's index: equal strings, as a dict of the bands finds */
        for (; c < nbands; c++) {
            PyObject *band = PyTuple_GET_ITEM(bands, c);
            if (band == phase)
                break;
            int eq = PyUnicode_Compare(band, phase);
            if (eq == -1 && PyErr_Occurred())
                goto fail;
            if (eq == 0)
                break;
        }
        if (c == nbands)
            goto none;
        sums[c] += e - s;
        f[k++] = c;
        f[k++] = s;
        f[k++] = e;
        last = e;
        PyObject *iv = interval->tp_alloc(interval, 3); /* as tuple.__new__(cls, triple) */
        if (iv == NULL)
            goto fail;
        PyTuple_SET_ITEM(iv, 0, Py_NewRef(phase));
        PyTuple_SET_ITEM(iv, 1, Py_NewRef(start));
        PyTuple_SET_ITEM(iv, 2, Py_NewRef(end));
        if (PyList_Append(out, iv) < 0) {
            Py_XDECREF(iv);
            goto fail;
        }
        Py_DECREF(iv);
    }
    if (last > end_ns)
        goto none;
    flat = PyBytes_FromStringAndSize((const char *)f, k * (Py_ssize_t)sizeof(long long));
    if (flat == NULL)
        goto fail;
    PyObject *arr = PyObject_CallFunction(array_type, "sO", "q", flat);
    if (arr == NULL)
        goto fail;
    PyObject *band_sums = PyList_New(nbands);
    if (band_sums == NULL) {
        Py_DECREF(arr);
        goto fail;
    }
    for (Py_ssize_t b = 0; b < nbands; b++) {
        PyObject *v = PyLong_FromLongLong(sums[b]);
        if (v == NULL) {
            Py_DECREF(arr);
            Py_DECREF(band_sums);
            goto fail;
        }
        PyList_SET_ITEM(band_sums, b, v);
    }
    result = PyTuple_Pack(3, out, arr, band_sums);
    Py_DECREF(arr);
    Py_DECREF(band_sums);
    goto fail; /* releases out and flat */
none:
    result = Py_NewRef(Py_None);
    goto fail;
python:
    PyErr_Clear();
    result = Py_NewRef(Py_NotImplemented);
fail:
    PyMem_Free(f);
    Py_XDECREF(out);
    Py_XDECREF(flat);
    return result;
}

/* ``_value(v)`` of _otlp_typed (a new reference): the usual types here, the rest there */
static PyObject *
value_of(PyObject *v)
{
    if (!Py_IS_TYPE(v, st.value))
        return PyObject_CallOneArg(st.attr_value, v);
    PyObject *x = field(v, st.string);
    if (x == NULL)
        return NULL;
    if (x != st.unset)
        return Py_NewRef(x);
    if ((x = field(v, st.integer)) == NULL)
        return NULL;
    if (x != st.unset) {
        if (PyLong_CheckExact(x))
            return Py_NewRef(x);
        if (PyUnicode_CheckExact(x))
            return int_of(x);
        return PyObject_CallOneArg(st.attr_value, v);
    }
    if ((x = field(v, st.dbl)) == NULL)
        return NULL;
    if (PyFloat_CheckExact(x))
        return Py_NewRef(x);
    if (x == st.unset) {
        if ((x = field(v, st.boolean)) == NULL)
            return NULL;
        if (x != st.unset)
            return Py_NewRef(x);
        if ((x = field(v, st.items)) == NULL)
            return NULL;
        if (x == st.unset)
            return Py_NewRef(Py_None);
    }
    return PyObject_CallOneArg(st.attr_value, v);
}

/* attributes(kvs): ``_attrs({kv.key: kv.value for kv in kvs or ()})`` of _otlp_typed */
static PyObject *
attributes(PyObject *self, PyObject *kvs)
{
    if (!st.ready) {
        PyErr_SetString(PyExc_RuntimeError, "configure_rows() first");
        return NULL;
    }
    PyObject *out = PyDict_New();
    if (out == NULL || kvs == Py_None)
        return out;
    if (!PyList_CheckExact(kvs)) {
        PyErr_SetString(PyExc_TypeError, "attributes: a list");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(kvs); i++) {
        PyObject *key, *v;
        if (key_value(PyList_GET_ITEM(kvs, i), &key, &v) < 0)
            goto fail;
        Py_INCREF(key); /* the known keys as the constants that look them up */
        if (shared(&key) < 0) {
            Py_DECREF(key);
            goto fail;
        }
        int failed = PyDict_SetItem(out, key, v);
        Py_DECREF(key);
        if (failed)
            goto fail;
    }
    /* then each value converted, in the dict's order (the last of a repeated key) */
    Py_ssize_t pos = 0;
    PyObject *key, *v;
    while (PyDict_Next(out, &pos, &key, &v)) {
        PyObject *x = v == st.unset ? Py_NewRef(Py_None) : value_of(v);
        if (x == NULL)
            goto fail;
        int failed = PyDict_SetItem(out, key, x); /* an existing key: allowed while iterating */
        Py_DECREF(x);
        if (failed)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* a count the assembler compares with: an int, or inf (never); -1 with an exception */
static long long
bound_of(PyObject *x)
{
    if (PyFloat_Check(x)) {
        double d = PyFloat_AS_DOUBLE(x);
        if (d >= 9.2e18)
            return LLONG_MAX;
        PyErr_SetString(PyExc_ValueError, "a finite float bound");
        return -1;
    }
    return PyLong_AsLongLong(x);
}

/* a time the assembler takes as is: an int in (0, 2**63); 0 for anything else */
static inline long long
time_of(PyObject *x)
{
    if (!PyLong_CheckExact(x))
        return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
    return overflow || v <= 0 ? 0 : v;
}

/* add_run(rows, i, opened, done, seen, buffered, due, limit, peak, new_trace, in_flight)
   -> (i, seen, buffered, peak, stop, trace): TraceAssembler._add_each for rows[i:], in C
   while each row is a plain one: a span with its times, of a trace not finished, not seen
   before in it, not the writer's in-flight record. It stops
   - before a row that is not plain (stop 0, i < len(rows)): add_rows takes it its way;
   - after a plain row it kept that has a whole span (stop 1, ``trace`` its trace: add_rows
     reads the span), or after which traces are due or too many spans are held (stop 2):
     add_rows then does what follows a kept row (peak not yet counted for it);
   - at the end of the rows (stop 0, i == len(rows)). */
static PyObject *
add_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static PyObject *records_name, *has_phase_name;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "add_run takes 11 arguments");
        return NULL;
    }
    if (records_name == NULL) {
        records_name = PyUnicode_InternFromString("records");
        has_phase_name = PyUnicode_InternFromString("has_phase");
        if (records_name == NULL || has_phase_name == NULL)
            return NULL;
    }
    PyObject *rows = args[0], *opened = args[2], *done = args[3], *new_trace = args[9];
    PyObject *in_flight = args[10];
    if (!PyList_CheckExact(rows) || !PyDict_Check(opened) || !PyDict_Check(done)
        || !PyUnicode_CheckExact(in_flight)) {
        PyErr_SetString(PyExc_TypeError, "add_run: a list of rows, two dicts, a str");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    long long seen = PyLong_AsLongLong(args[4]), buffered = PyLong_AsLongLong(args[5]);
    long long due = bound_of(args[6]), limit = bound_of(args[7]);
    long long peak = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *tid = NULL, *trace = NULL, *records = NULL; /* the trace of the run (owned) */
    int has_phase = 0, stop = 0;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    while (i < n) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 8)
            break;
        PyObject *t = PyTuple_GET_ITEM(row, 0), *span_id = PyTuple_GET_ITEM(row, 1);
        PyObject *parent = PyTuple_GET_ITEM(row, 2), *name = PyTuple_GET_ITEM(row, 3);
        PyObject *start = PyTuple_GET_ITEM(row, 4), *end = PyTuple_GET_ITEM(row, 5);
        PyObject *phase = PyTuple_GET_ITEM(row, 6), *whole = PyTuple_GET_ITEM(row, 7);
        if (parent == Py_None) { /* the in-flight record is skipped, uncounted: add_rows */
            if (!PyUnicode_CheckExact(name))
                break;
            int eq = PyUnicode_Compare(name, in_flight);
            if (eq == -1 && PyErr_Occurred())
                goto fail;
            if (eq == 0)
                break;
        }
        long long s = time_of(start), e = time_of(end);
        if (s == 0 || e == 0 || e < s)
            break;
        if (t != tid) {
            if (!PyUnicode_CheckExact(t))
                break;
            int in = PyDict_Contains(done, t);
            if (in < 0)
                goto fail;
            if (in)
                break;
            if (has_phase && PyObject_SetAttr(trace, has_phase_name, Py_True) < 0)
                goto fail;
            has_phase = 0;
            PyObject *next = PyDict_GetItemWithError(opened, t);
            if (next != NULL)
                Py_INCREF(next);
            else {
                if (PyErr_Occurred())
                    goto fail;
                next = PyObject_CallNoArgs(new_trace); /* opened[tid] = _Trace() */
                if (next == NULL || PyObject_SetItem(opened, t, next) < 0) {
                    Py_XDECREF(next);
                    goto fail;
                }
            }
            Py_XSETREF(trace, next);
            Py_XSETREF(records, PyObject_GetAttr(trace, records_name));
            if (records == NULL)
                goto fail;
            if (!PyDict_CheckExact(records)) {
                PyErr_SetString(PyExc_TypeError, "a trace's records: not a dict");
                goto fail;
            }
            tid = t;
        }
        int seen_before = PyDict_Contains(records, span_id);
        if (seen_before < 0)
            goto fail;
        if (seen_before)
            break;
        PyObject *rec = PyTuple_Pack(5, span_id, parent, start, end, phase);
        if (rec == NULL)
            goto fail;
        if ((phase == Py_None || PyUnicode_CheckExact(phase)) && PyLong_CheckExact(span_id)
            && (parent == Py_None || PyLong_CheckExact(parent)))
            PyObject_GC_UnTrack(rec); /* ints, a str, None: nothing for the collector */
        int failed = PyDict_SetItem(records, span_id, rec);
        Py_DECREF(rec);
        if (failed)
            goto fail;
        seen++;
        buffered++;
        i++;
        if (whole != Py_None) {
            stop = 1;
            break;
        }
        if (phase != Py_None)
            has_phase = 1;
        if (seen >= due || buffered > limit) {
            stop = 2;
            break;
        }
        if (buffered > peak)
            peak = buffered;
    }
    if (has_phase && PyObject_SetAttr(trace, has_phase_name, Py_True) < 0)
        goto fail;
    Py_XDECREF(records);
    PyObject *out = Py_BuildValue("(nLLLiO)", i, seen, buffered, peak, stop,
                                  stop == 1 ? trace : Py_None);
    Py_XDECREF(trace);
    return out;
fail:
    Py_XDECREF(records);
    Py_XDECREF(trace);
    return NULL;
}

static PyMethodDef methods[] = {
    {"configure_rows", configure, METH_VARARGS,
     "configure(Span, KeyValue, Value, Array, UNSET, phase_key, whole_keys, trace_miss, "
     "parent_miss, check_value, phase_value, whole_span, value, names): what span_rows and "
     "attributes read with."},
    {"add_run", (PyCFunction)(void (*)(void))add_run, METH_FASTCALL,
     "add_run(rows, i, opened, done, seen, buffered, due, limit, peak, new_trace, "
     "in_flight): TraceAssembler._add_each for a run of plain rows; "
     "(i, seen, buffered, peak, stop, trace)."},
    {"attributes", attributes, METH_O,
     "attributes(kvs): a span's attributes as a dict, as _otlp_typed._attrs has them."},
    {"span_rows", (PyCFunction)(void (*)(void))span_rows, METH_FASTCALL,
     "span_rows(spans, out, traces, parents, service, run): a row per span, appended."},
    {"sequential_children", (PyCFunction)(void (*)(void))sequential_children, METH_FASTCALL,
     "sequential_children(root_id, start, end, spans, bands, PhaseInterval, array): "
     "as span_tree.sequential_children, or NotImplemented."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Two hot loops of the report in C (see the source).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&module);
    /* the interface's version: _base/compiled.py uses a build of this one only */
    if (m != NULL && PyModule_AddIntConstant(m, "API", 1) < 0)
        Py_CLEAR(m);
    return m;
}
