/* The fast path's per-call work in C (schedc.package.native builds it with the system's C compiler
 * at the first call on torch tensors, once per machine): a function of one kernel whose parameters
 * are the caller's arrays, and after them the by-value structs made of the arrays' addresses (TMA
 * tensor maps). Plan(...).call(args) makes fastcall.CallPlan.pointers' checks on each argument --
 * its type, dtype, shape, device, strides, alignment, a null pointer, the overlap of a written
 * array --, asks torch for its current stream, has the structs encoded (by the Python callable
 * it was given) where the addresses differ from the last call's, and launches with a parameter
 * buffer made once. It returns -1 where a check fails (the general path takes the call and
 * explains it), 0 once launched, or the driver's error code. It holds the GIL from the first
 * check to the launch and runs no Python code between filling the buffer and launching, so
 * threads take turns. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DIMS 8
#define MAX_ARRAYS 32
#define MAX_VALUES 16
#define VALUE_BYTES 128  /* a CUtensorMap */

typedef int (*launch_fn)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shared, void *stream, void **params, void **extra);
typedef int (*set_context_fn)(void *context);

typedef struct {
    Py_ssize_t position;           /* among the call's arguments */
    PyObject *dtype;               /* compared by identity, as torch's dtypes are singletons */
    int ndim;
    long long shape[MAX_DIMS];
    long long strides[MAX_DIMS];   /* every dimension's, in elements */
    int fixed[MAX_DIMS];           /* 1 where a dimension is longer than 1: only its stride is fixed */
    int row_major;                 /* is_contiguous() says the strides are right */
    unsigned long long nbytes;
    unsigned long long alignment;
} Array;

typedef struct {
    PyObject_HEAD
    PyObject *tensor_type;
    PyObject *stream_function;     /* ordinal -> the raw stream torch launches on */
    PyObject *ordinal_object;
    long long ordinal;             /* the device every tensor must be on (get_device()) */
    Py_ssize_t arity;
    int count;
    Array arrays[MAX_ARRAYS];
    int pair_count;
    int pairs[MAX_ARRAYS * (MAX_ARRAYS - 1) / 2][2];
    launch_fn launch;
    set_context_fn set_context;
    void *context;
    void *function;
    unsigned grid[3], block[3], shared;
    uint64_t pointers[MAX_ARRAYS];
    Py_ssize_t value_count;
    PyObject *encode;              /* (*addresses) -> the structs' bytes; NULL without structs */
    int encoded;                   /* values hold the structs of the addresses in encoded_for */
    uint64_t encoded_for[MAX_ARRAYS];
    unsigned char *values;         /* value_count structs of VALUE_BYTES, 64-byte aligned in storage */
    unsigned char storage[MAX_VALUES * VALUE_BYTES + 64];
    void *params[MAX_ARRAYS + MAX_VALUES];
} Plan;

static PyObject *s_dtype, *s_shape, *s_get_device, *s_is_contiguous, *s_stride, *s_data_ptr;

/* -1: a Python error to raise; 0: the check fails; 1: it passes */
static int failed_softly(void) {
    if (PyErr_ExceptionMatches(PyExc_Exception)) {  /* a tensor that cannot say: the general path explains */
        PyErr_Clear();
        return 0;
    }
    return -1;
}

static int equal_ints(PyObject *sequence, const long long *values, int count, const int *only) {
    if (!PyTuple_Check(sequence) || PyTuple_GET_SIZE(sequence) != count)
        return 0;
    for (int d = 0; d < count; d++) {
        if (only && !only[d])
            continue;
        long long n = PyLong_AsLongLong(PyTuple_GET_ITEM(sequence, d));
        if (n == -1 && PyErr_Occurred())
            return failed_softly();
        if (n != values[d])
            return 0;
    }
    return 1;
}

static int call_int(PyObject *value, PyObject *name, long long *result) {
    PyObject *answer = PyObject_CallMethodNoArgs(value, name);
    if (!answer)
        return failed_softly();
    *result = PyLong_AsLongLong(answer);
    Py_DECREF(answer);
    if (*result == -1 && PyErr_Occurred())
        return failed_softly();
    return 1;
}

static int strides_fit(PyObject *value, const Array *a) {
    if (a->row_major) {
        PyObject *answer = PyObject_CallMethodNoArgs(value, s_is_contiguous);
        if (!answer)
            return failed_softly();
        int contiguous = answer == Py_True;
        Py_DECREF(answer);
        if (contiguous)
            return 1;
    }
    PyObject *strides = PyObject_CallMethodNoArgs(value, s_stride);
    if (!strides)
        return failed_softly();
    int found = equal_ints(strides, a->strides, a->ndim, NULL);  /* every stride as the layout's */
    if (found == 0)
        found = equal_ints(strides, a->strides, a->ndim, a->fixed);  /* or those a layout fixes */
    Py_DECREF(strides);
    return found;
}

static int array_fits(Plan *self, PyObject *value, const Array *a, uint64_t *pointer) {
    if (!PyObject_TypeCheck(value, (PyTypeObject *)self->tensor_type))
        return 0;
    PyObject *dtype = PyObject_GetAttr(value, s_dtype);
    if (!dtype)
        return failed_softly();
    Py_DECREF(dtype);
    if (dtype != a->dtype)
        return 0;
    PyObject *shape = PyObject_GetAttr(value, s_shape);
    if (!shape)
        return failed_softly();
    int found = equal_ints(shape, a->shape, a->ndim, NULL);
    Py_DECREF(shape);
    if (found != 1)
        return found;
    long long device;
    if ((found = call_int(value, s_get_device, &device)) != 1)
        return found;
    if (device != self->ordinal)
        return 0;
    if ((found = strides_fit(value, a)) != 1)
        return found;
    PyObject *answer = PyObject_CallMethodNoArgs(value, s_data_ptr);
    if (!answer)
        return failed_softly();
    *pointer = PyLong_AsUnsignedLongLong(answer);
    Py_DECREF(answer);
    if (*pointer == (uint64_t)-1 && PyErr_Occurred())
        return failed_softly();
    if (*pointer % a->alignment || (!*pointer && a->nbytes))
        return 0;
    return 1;
}

/* the structs for these addresses into values: -1 with a Python error set, else 0 (Python code
 * runs here: it is called before the parameter buffer is filled) */
static int encode_values(Plan *self, const uint64_t *pointers, unsigned char *values) {
    PyObject *addresses = PyTuple_New(self->count);
    if (!addresses)
        return -1;
    for (int n = 0; n < self->count; n++) {
        PyObject *address = PyLong_FromUnsignedLongLong(pointers[n]);
        if (!address) {
            Py_DECREF(addresses);
            return -1;
        }
        PyTuple_SET_ITEM(addresses, n, address);
    }
    PyObject *encoded = PyObject_CallObject(self->encode, addresses);
    Py_DECREF(addresses);
    if (!encoded)
        return -1;
    PyObject *items = PySequence_Fast(encoded, "the structs' bytes");
    Py_DECREF(encoded);
    if (!items)
        return -1;
    int failed = PySequence_Fast_GET_SIZE(items) != self->value_count;
    for (Py_ssize_t v = 0; v < self->value_count && !failed; v++) {
        char *data;
        Py_ssize_t size;
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(items, v), &data, &size) < 0) {
            Py_DECREF(items);
            return -1;
        }
        failed = size > VALUE_BYTES;
        if (!failed) {
            memset(values + v * VALUE_BYTES, 0, VALUE_BYTES);
            memcpy(values + v * VALUE_BYTES, data, (size_t)size);
        }
    }
    Py_DECREF(items);
    if (failed) {
        PyErr_SetString(PyExc_ValueError, "Plan: the structs encoded are not the kernel's");
        return -1;
    }
    return 0;
}

static PyObject *plan_call(Plan *self, PyObject *args) {
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->arity)
        return PyLong_FromLong(-1);
    uint64_t pointers[MAX_ARRAYS];
    for (int n = 0; n < self->count; n++) {
        const Array *a = &self->arrays[n];
        int found = array_fits(self, PyTuple_GET_ITEM(args, a->position), a, &pointers[n]);
        if (found != 1)
            return found < 0 ? NULL : PyLong_FromLong(-1);
    }
    for (int p = 0; p < self->pair_count; p++) {
        int a = self->pairs[p][0], b = self->pairs[p][1];
        if (pointers[a] < pointers[b] + self->arrays[b].nbytes && pointers[b] < pointers[a] + self->arrays[a].nbytes)
            return PyLong_FromLong(-1);
    }
    PyObject *stream_object = PyObject_CallOneArg(self->stream_function, self->ordinal_object);
    if (!stream_object)
        return NULL;
    void *stream = PyLong_AsVoidPtr(stream_object);
    Py_DECREF(stream_object);
    if (!stream && PyErr_Occurred())
        return NULL;
    /* The structs kept are used only where no Python code runs between finding them right and the
     * launch (Python code may let another thread's call change them); encoded ones are this call's
     * own copy until the buffer is filled, after the last Python code. */
    unsigned char values[MAX_VALUES * VALUE_BYTES];
    int encode = self->value_count
        && !(self->encoded && !memcmp(self->encoded_for, pointers, sizeof(uint64_t) * self->count));
    if (encode) {
        if (encode_values(self, pointers, values) < 0)
            return NULL;
        /* no Python code from here to the launch: another thread's call cannot come between */
        memcpy(self->values, values, (size_t)VALUE_BYTES * self->value_count);
        memcpy(self->encoded_for, pointers, sizeof(uint64_t) * self->count);
        self->encoded = 1;
    }
    memcpy(self->pointers, pointers, sizeof(uint64_t) * self->count);
    int result = self->launch(self->function, self->grid[0], self->grid[1], self->grid[2], self->block[0],
                              self->block[1], self->block[2], self->shared, stream, self->params, NULL);
    if (result) {  /* no context, or another one, current on this thread: the function's, then again */
        self->set_context(self->context);
        result = self->launch(self->function, self->grid[0], self->grid[1], self->grid[2], self->block[0],
                              self->block[1], self->block[2], self->shared, stream, self->params, NULL);
    }
    return PyLong_FromLong(result);
}

static int read_ints(PyObject *sequence, long long *values, int count, const char *what) {
    PyObject *items = PySequence_Fast(sequence, what);
    if (!items)
        return -1;
    if (PySequence_Fast_GET_SIZE(items) != count) {
        Py_DECREF(items);
        PyErr_Format(PyExc_ValueError, "%s: expected %d values", what, count);
        return -1;
    }
    for (int d = 0; d < count; d++) {
        values[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(items, d));
        if (values[d] == -1 && PyErr_Occurred()) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return 0;
}

/* (position, dtype, shape, strides, fixed, row_major, nbytes, alignment) */
static int read_array(PyObject *spec, Array *a) {
    PyObject *dtype, *shape, *strides, *fixed;
    int row_major;
    if (!PyArg_ParseTuple(spec, "nOOOOpKK", &a->position, &dtype, &shape, &strides, &fixed, &row_major, &a->nbytes,
                          &a->alignment))
        return -1;
    Py_ssize_t ndim = PyObject_Length(shape);
    if (ndim < 0)
        return -1;
    if (ndim > MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "an array of %zd dimensions (at most %d)", ndim, MAX_DIMS);
        return -1;
    }
    a->ndim = (int)ndim;
    a->row_major = row_major;
    if (a->alignment == 0)
        a->alignment = 1;
    long long flags[MAX_DIMS];
    if (read_ints(shape, a->shape, a->ndim, "shape") || read_ints(strides, a->strides, a->ndim, "strides")
        || read_ints(fixed, flags, a->ndim, "fixed"))
        return -1;
    for (int d = 0; d < a->ndim; d++)
        a->fixed[d] = flags[d] != 0;
    Py_INCREF(dtype);
    a->dtype = dtype;
    return 0;
}

static void plan_dealloc(Plan *self) {
    for (int n = 0; n < self->count; n++)
        Py_XDECREF(self->arrays[n].dtype);
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->stream_function);
    Py_XDECREF(self->ordinal_object);
    Py_XDECREF(self->encode);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Plan(tensor_type, stream_function, ordinal, arity, arrays, pairs, launch, set_context, context,
 *      function, grid, block, shared[, values, encode]): launch and set_context the addresses of
 *      cuLaunchKernel and cuCtxSetCurrent (or of stand-ins), context and function the driver's
 *      handles; values the kernel's by-value structs after the arrays, encode(*addresses) their
 *      bytes for the arrays at those addresses. */
static int plan_init(Plan *self, PyObject *args, PyObject *kwargs) {
    PyObject *tensor_type, *stream_function, *arrays, *pairs, *encode = Py_None;
    unsigned long long launch, set_context, context, function;
    if (self->tensor_type) {
        PyErr_SetString(PyExc_TypeError, "Plan: made once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OOLnOOKKKK(III)(III)I|nO", &tensor_type, &stream_function, &self->ordinal,
                          &self->arity, &arrays, &pairs, &launch, &set_context, &context, &function, &self->grid[0],
                          &self->grid[1], &self->grid[2], &self->block[0], &self->block[1], &self->block[2],
                          &self->shared, &self->value_count, &encode))
        return -1;
    if (self->value_count < 0 || self->value_count > MAX_VALUES || (self->value_count && !PyCallable_Check(encode))) {
        PyErr_Format(PyExc_ValueError, "Plan: at most %d structs, and a callable to encode them", MAX_VALUES);
        return -1;
    }
    if (!PyType_Check(tensor_type) || !PyCallable_Check(stream_function) || !launch || !set_context) {
        PyErr_SetString(PyExc_TypeError, "Plan: a type, a callable and two function addresses are needed");
        return -1;
    }
    Py_ssize_t count = PyObject_Length(arrays), pair_count = PyObject_Length(pairs);
    if (count < 0 || pair_count < 0)
        return -1;
    if (count > MAX_ARRAYS) {
        PyErr_Format(PyExc_ValueError, "a function of %zd arrays (at most %d)", count, MAX_ARRAYS);
        return -1;
    }
    for (Py_ssize_t n = 0; n < count; n++) {
        PyObject *spec = PySequence_GetItem(arrays, n);
        int failed = !spec || read_array(spec, &self->arrays[n]);
        Py_XDECREF(spec);
        if (failed)
            return -1;
        self->count = (int)n + 1;
        if (self->arrays[n].position < 0 || self->arrays[n].position >= self->arity) {
            PyErr_SetString(PyExc_ValueError, "an array's position is past the arguments");
            return -1;
        }
    }
    for (Py_ssize_t p = 0; p < pair_count; p++) {
        long long pair[2];
        PyObject *item = PySequence_GetItem(pairs, p);
        int failed = !item || read_ints(item, pair, 2, "pair");
        Py_XDECREF(item);
        if (failed)
            return -1;
        if (pair[0] < 0 || pair[1] < 0 || pair[0] >= count || pair[1] >= count) {
            PyErr_SetString(PyExc_ValueError, "a pair names an array past the arrays");
            return -1;
        }
        self->pairs[p][0] = (int)pair[0];
        self->pairs[p][1] = (int)pair[1];
    }
    self->pair_count = (int)pair_count;
    Py_INCREF(tensor_type);
    self->tensor_type = tensor_type;
    Py_INCREF(stream_function);
    self->stream_function = stream_function;
    self->ordinal_object = PyLong_FromLongLong(self->ordinal);
    if (!self->ordinal_object)
        return -1;
    self->launch = (launch_fn)(uintptr_t)launch;
    self->set_context = (set_context_fn)(uintptr_t)set_context;
    self->context = (void *)(uintptr_t)context;
    self->function = (void *)(uintptr_t)function;
    for (int n = 0; n < self->count; n++)
        self->params[n] = &self->pointers[n];
    self->values = (unsigned char *)(((uintptr_t)self->storage + 63) & ~(uintptr_t)63);
    for (Py_ssize_t v = 0; v < self->value_count; v++)
        self->params[self->count + v] = self->values + v * VALUE_BYTES;
    if (self->value_count) {
        Py_INCREF(encode);
        self->encode = encode;
    }
    return 0;
}

static PyMethodDef plan_methods[] = {
    {"call", (PyCFunction)plan_call, METH_O,
     "call(args) -> -1 (a check failed: the general path takes the call), 0 (launched) or the driver's error"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_schedc_fastlaunch.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A function's launch on torch tensors, its checks and parameter buffer made once.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)plan_init,
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_methods = plan_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_schedc_fastlaunch", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__schedc_fastlaunch(void) {
    s_dtype = PyUnicode_InternFromString("dtype");
    s_shape = PyUnicode_InternFromString("shape");
    s_get_device = PyUnicode_InternFromString("get_device");
    s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
    s_stride = PyUnicode_InternFromString("stride");
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    if (!s_dtype || !s_shape || !s_get_device || !s_is_contiguous || !s_stride || !s_data_ptr
        || PyType_Ready(&PlanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&PlanType);
    if (PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0) {
        Py_DECREF(&PlanType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
