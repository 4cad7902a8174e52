// chorus._chorus: the C API on numpy arrays, with the GIL released during every call that may
// wait (np_all_reduce: unless the message is small and no other Python thread exists). The
// friendly layer (chorus.Comm, exceptions) is python/chorus/__init__.py; this file makes every
// check of chorus.Comm's numpy arguments (npArg: array, C-contiguous, writable, dtype, size, op,
// root), builds the outputs it is not given and calls the library. all_reduce, reduce and
// broadcast are plain METH_FASTCALL functions, where microseconds matter.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "chorus/chorus.h"
#include "core/launcher_env.h"
#include "core/slurm_env.h"

namespace py = pybind11;

namespace {

// A failed call: the result code and the library's message (which names the rank).
struct CallError {
  int code;
  std::string message;
};

py::object gErrorFactory;  // chorus._make_error(code, message) -> exception instance

void check(chorusResult_t r, chorusComm_t comm) {
  if (r == chorusSuccess || r == chorusInProgress) return;
  throw CallError{int(r), chorusGetLastError(comm)};
}

// A communicator handle owned by Python. Destroyed when closed or collected.
struct Comm {
  chorusComm_t c = nullptr;
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() {
    if (c != nullptr) chorusCommDestroy(c);  // collected without close(): local cleanup only
  }
  chorusComm_t get() const {
    if (c == nullptr) throw CallError{chorusInvalidUsage, "chorus: the communicator is closed"};
    return c;
  }
};

// chorusMemAlloc memory owned by a Python object (module.cc "Registered memory").
struct MemBlock {
  void* p = nullptr;
  size_t bytes = 0;
  MemBlock() = default;
  MemBlock(const MemBlock&) = delete;
  MemBlock& operator=(const MemBlock&) = delete;
  ~MemBlock() {
    if (p != nullptr) chorusMemFree(p);
  }
};

// The memory of a C-contiguous buffer (chorus.Comm.register: any object with the buffer protocol).
struct Buf {
  void* ptr = nullptr;
  size_t bytes = 0;
};

Buf bufferOf(const py::handle& obj, const char* what) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    throw CallError{chorusInvalidArgument, std::string("chorus: ") + what +
                                               " must be a C-contiguous buffer (a numpy array)"};
  }
  const Buf b{view.buf, size_t(view.len)};
  PyBuffer_Release(&view);  // the caller keeps the object (and so the memory) alive
  return b;
}

py::bytes idBytes(const chorusUniqueId& id) {
  return py::bytes(id.internal, sizeof(id.internal));
}

chorusUniqueId idFromBytes(const py::bytes& b) {
  std::string s = b;
  if (s.size() != CHORUS_UNIQUE_ID_BYTES)
    throw CallError{chorusInvalidArgument, "chorus: unique id must be " +
                                               std::to_string(CHORUS_UNIQUE_ID_BYTES) + " bytes"};
  chorusUniqueId id;
  memcpy(id.internal, s.data(), sizeof(id.internal));
  return id;
}

// ---- numpy fast path (chorus.Comm.all_reduce) -------------------------------------------------
// The checks chorus.Comm used to make in Python (isinstance, flags, dtype, np.prod of the shape)
// cost 5-25 us per call, more than a small collective. Here they read the array object's fields
// directly: numpy's PyArrayObject and PyArray_Descr layouts below are its stable ABI (the same in
// numpy 1.x and 2.x up to type_num), so no numpy headers are needed at build time.

struct NpArray {  // numpy's PyArrayObject_fields, leading part
  PyObject_HEAD char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};
struct NpDescr {  // numpy's PyArray_Descr, leading part
  PyObject_HEAD PyTypeObject* typeobj;
  char kind;
  char type;
  char byteorder;
  char formerFlags;
  int typeNum;
};
constexpr int kNpCContiguous = 0x0001;  // NPY_ARRAY_C_CONTIGUOUS
constexpr int kNpWriteable = 0x0400;    // NPY_ARRAY_WRITEABLE
constexpr int kNoType = -1;

PyTypeObject* gNdarray = nullptr;  // numpy.ndarray, looked up once
int gTypeOfNum[32];                // numpy type number -> chorusDataType_t, kNoType if none

void initNumpyTypes() {
  for (int& t : gTypeOfNum) t = kNoType;
  auto integer = [](size_t size, bool isSigned) {
    switch (size) {
      case 1:
        return int(isSigned ? chorusInt8 : chorusUint8);
      case 4:
        return int(isSigned ? chorusInt32 : chorusUint32);
      case 8:
        return int(isSigned ? chorusInt64 : chorusUint64);
      default:
        return kNoType;
    }
  };
  // NPY_BYTE 1 ... NPY_DOUBLE 12, NPY_HALF 23 (numpy's enum NPY_TYPES, fixed since 1.x)
  gTypeOfNum[1] = integer(sizeof(signed char), true);
  gTypeOfNum[2] = integer(sizeof(unsigned char), false);
  gTypeOfNum[3] = integer(sizeof(short), true);
  gTypeOfNum[4] = integer(sizeof(unsigned short), false);
  gTypeOfNum[5] = integer(sizeof(int), true);
  gTypeOfNum[6] = integer(sizeof(unsigned), false);
  gTypeOfNum[7] = integer(sizeof(long), true);
  gTypeOfNum[8] = integer(sizeof(unsigned long), false);
  gTypeOfNum[9] = integer(sizeof(long long), true);
  gTypeOfNum[10] = integer(sizeof(unsigned long long), false);
  gTypeOfNum[11] = chorusFloat32;
  gTypeOfNum[12] = chorusFloat64;
  gTypeOfNum[23] = chorusFloat16;
}

PyTypeObject* ndarrayType() {
  if (gNdarray == nullptr) {
    py::object t = py::module_::import("numpy").attr("ndarray");
    gNdarray = reinterpret_cast<PyTypeObject*>(t.release().ptr());  // kept for the process
    initNumpyTypes();
  }
  return gNdarray;
}

// Messages name the call, the argument and the rank, like the library's own.
[[noreturn]] void argError(chorusComm_t h, const char* call, const std::string& what) {
  int rank = -1;
  if (h != nullptr) chorusCommUserRank(h, &rank);
  throw CallError{chorusInvalidArgument,
                  std::string("chorus: ") + call + " (rank " + std::to_string(rank) + "): " + what};
}

std::string typeName(PyObject* o) {
  return Py_TYPE(o)->tp_name;
}
std::string dtypeName(const NpArray* a) {
  return py::str(a->descr).cast<std::string>();
}

// An array argument: a C-contiguous numpy array of a reduction type (writable for outputs).
struct NpArg {
  NpArray* a;
  int type;
  size_t count;
};

// `typed` false: any dtype, seen as bytes (copy-only collectives); count is then in bytes.
NpArg npArg(chorusComm_t h, const char* call, const char* name, PyObject* obj, bool writable,
            bool typed = true) {
  if (!PyObject_TypeCheck(obj, ndarrayType()))
    argError(h, call, std::string(name) + " must be a numpy array, got " + typeName(obj));
  auto* a = reinterpret_cast<NpArray*>(obj);
  if (!(a->flags & kNpCContiguous))
    argError(h, call,
             std::string(name) + " must be C-contiguous (np.ascontiguousarray makes a copy)");
  if (writable && !(a->flags & kNpWriteable))
    argError(h, call, std::string(name) + " is read-only (it receives the result)");
  size_t count = 1;
  for (int i = 0; i < a->nd; ++i) count *= size_t(a->dimensions[i]);
  if (!typed) {
    if (reinterpret_cast<const NpDescr*>(a->descr)->typeNum == 17)  // NPY_OBJECT
      argError(h, call, std::string(name) + " has dtype object: its elements are pointers");
    // the item size moved inside PyArray_Descr in numpy 2: ask the dtype (rare: bytes calls)
    const Py_ssize_t itemsize = py::handle(a->descr).attr("itemsize").cast<Py_ssize_t>();
    return NpArg{a, chorusInt8, count * size_t(itemsize)};
  }
  const auto* d = reinterpret_cast<const NpDescr*>(a->descr);
  const int num = d->typeNum;
  int type = (num >= 0 && num < 32) ? gTypeOfNum[num] : kNoType;
  if (d->byteorder == '>') type = kNoType;  // byte-swapped: not this machine's numbers
  if (type == kNoType)
    argError(h, call,
             std::string(name) + ": unsupported element type " + dtypeName(a) +
                 " (int8, uint8, int32, uint32, int64, uint64, float16, float32, float64; "
                 "bfloat16 through chorus.torch)");
  return NpArg{a, type, count};
}

int opOf(chorusComm_t h, const char* call, PyObject* op) {
  if (PyLong_CheckExact(op)) {
    const long v = PyLong_AsLong(op);
    if (v >= chorusSum && v <= chorusAvg) return int(v);
    PyErr_Clear();
  } else if (PyUnicode_Check(op)) {
    std::string s;
    Py_ssize_t n = 0;
    const char* u = PyUnicode_AsUTF8AndSize(op, &n);
    if (u == nullptr) PyErr_Clear();
    for (Py_ssize_t i = 0; u != nullptr && i < n; ++i)
      s += char(u[i] >= 'A' && u[i] <= 'Z' ? u[i] - 'A' + 'a' : u[i]);
    static const std::pair<const char*, int> kNames[] = {
        {"sum", chorusSum}, {"prod", chorusProd}, {"product", chorusProd}, {"max", chorusMax},
        {"min", chorusMin}, {"avg", chorusAvg},   {"mean", chorusAvg}};
    for (const auto& [name, v] : kNames)
      if (s == name) return v;
    argError(h, call,
             "unknown op " + py::repr(op).cast<std::string>() + " (sum, prod, max, min, avg)");
  } else if (PyIndex_Check(op) || PyFloat_Check(op)) {  // numpy integers, bool, 2.0
    for (int v = chorusSum; v <= chorusAvg; ++v) {
      const int eq = PyObject_RichCompareBool(op, py::int_(v).ptr(), Py_EQ);
      if (eq < 0) PyErr_Clear();
      if (eq > 0) return v;
    }
  }
  argError(h, call,
           "unknown op " + py::repr(op).cast<std::string>() + " (sum, prod, max, min, avg)");
}

// What an NpArg's count counts per element: 1 when typed (elements), else the item size (bytes).
size_t perElement(const NpArg& x, bool typed) {
  if (typed) return 1;
  return std::max<size_t>(1, size_t(py::handle(x.a->descr).attr("itemsize").cast<Py_ssize_t>()));
}

// An out argument for x: x's element type (typed) or dtype, `elements` of them, writable.
NpArg npOut(chorusComm_t h, const char* call, const NpArg& x, PyObject* out, size_t elements,
            bool typed) {
  const NpArg r = npArg(h, call, "out", out, true, typed);
  const bool sameType =
      typed ? r.type == x.type : PyObject_RichCompareBool(r.a->descr, x.a->descr, Py_EQ) == 1;
  if (!sameType)
    argError(h, call, "out has dtype " + dtypeName(r.a) + ", expected " + dtypeName(x.a));
  const size_t have = r.count / perElement(r, typed);
  if (have != elements)
    argError(
        h, call,
        "out holds " + std::to_string(have) + " elements, expected " + std::to_string(elements));
  return r;
}

// Below this many bytes the GIL stays held while the call runs, when no other Python thread
// exists that could want it: releasing and taking it back costs more than such a call.
constexpr size_t kKeepGilBytes = 64 << 10;

bool otherPythonThreads() {
  PyThreadState* me = PyThreadState_Get();
  PyThreadState* head = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me));
  return head != me || PyThreadState_Next(head) != nullptr;
}

// chorus.Comm.all_reduce(x, out=None, op=SUM): every check, then the call; returns out (x when
// out is None).
// The collectives whose out has x's dtype and element count: all_reduce, reduce (typed) and
// broadcast (bytes, any dtype). out None (or x itself): in place.
enum class Same { kAllReduce, kReduce, kBroadcast };

PyObject* npSameShape(Same kind, Comm& c, PyObject* x, PyObject* out, PyObject* op,
                      PyObject* root) {
  const char* call = kind == Same::kAllReduce ? "all_reduce"
                     : kind == Same::kReduce  ? "reduce"
                                              : "broadcast";
  const bool typed = kind != Same::kBroadcast;
  chorusComm_t h = c.get();
  const bool inPlace = out == Py_None || out == x;
  const NpArg s = npArg(h, call, "x", x, inPlace, typed);
  NpArg r = s;
  if (!inPlace) {
    r = npOut(h, call, s, out, s.count / perElement(s, typed), typed);
  }
  const int o = kind == Same::kBroadcast ? 0 : opOf(h, call, op);
  int rt = 0;
  if (kind != Same::kAllReduce) {
    const long v = PyLong_AsLong(root);
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      argError(h, call, "root must be an int, got " + typeName(root));
    }
    if (v < INT_MIN || v > INT_MAX)
      argError(h, call, "root " + std::to_string(v) + " is out of range");
    rt = int(v);
  }
  const size_t bytes = typed ? s.count * chorusTypeSize(chorusDataType_t(s.type)) : s.count;
  auto run = [&]() {
    const auto t = chorusDataType_t(s.type);
    switch (kind) {
      case Same::kAllReduce:
        return chorusAllReduce(s.a->data, r.a->data, s.count, t, chorusRedOp_t(o), h, nullptr);
      case Same::kReduce:
        return chorusReduce(s.a->data, r.a->data, s.count, t, chorusRedOp_t(o), rt, h, nullptr);
      case Same::kBroadcast:
        break;
    }
    return chorusBroadcast(s.a->data, r.a->data, s.count, t, rt, h, nullptr);
  };
  chorusResult_t res;
  if (bytes < kKeepGilBytes && !otherPythonThreads()) {
    res = run();
  } else {
    py::gil_scoped_release nogil;
    res = run();
  }
  check(res, h);
  PyObject* result = inPlace ? x : out;
  Py_INCREF(result);
  return result;
}

// The fast functions are plain METH_FASTCALL functions, not pybind11 ones: pybind11's dispatcher
// (overload resolution, a type lookup by hash for Comm&, argument vectors) costs about as much as
// every check above. They take the CommHandle object as their first argument.
PyTypeObject* gCommType = nullptr;

Comm& commOf(PyObject* obj) {
  if (Py_TYPE(obj) != gCommType) return py::handle(obj).cast<Comm&>();  // a subclass, or raises
  return *reinterpret_cast<py::detail::instance*>(obj)->get_value_and_holder().value_ptr<Comm>();
}

void raiseCallError(const CallError& e) {
  if (!gErrorFactory) {
    PyErr_SetString(PyExc_RuntimeError, e.message.c_str());
    return;
  }
  try {
    py::object exc = gErrorFactory(e.code, e.message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  } catch (py::error_already_set& err) {
    err.restore();
  }
}

PyObject* fastCall(const char* usage, Py_ssize_t want, Py_ssize_t nargs, Same kind,
                   PyObject* const* args) {
  if (nargs != want) {
    PyErr_SetString(PyExc_TypeError, usage);
    return nullptr;
  }
  try {
    PyObject* op = kind == Same::kBroadcast ? Py_None : args[3];
    PyObject* root = kind == Same::kAllReduce ? Py_None : args[want - 1];
    return npSameShape(kind, commOf(args[0]), args[1], args[2], op, root);
  } catch (const CallError& e) {
    raiseCallError(e);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::cast_error& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// np_all_reduce(comm_handle, x, out_or_None, op)
PyObject* npAllReduceFast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return fastCall("np_all_reduce(comm, x, out, op)", 4, nargs, Same::kAllReduce, args);
}
// np_reduce(comm_handle, x, out_or_None, op, root)
PyObject* npReduceFast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return fastCall("np_reduce(comm, x, out, op, root)", 5, nargs, Same::kReduce, args);
}
// np_broadcast(comm_handle, x, out_or_None, root)
PyObject* npBroadcastFast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return fastCall("np_broadcast(comm, x, out, root)", 4, nargs, Same::kBroadcast, args);
}

template <PyObject* (*F)(PyObject*, PyObject* const*, Py_ssize_t)>
PyCFunction asCFunction() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F));
}

PyMethodDef gFastMethods[] = {
    {"np_all_reduce", asCFunction<npAllReduceFast>(), METH_FASTCALL,
     "np_all_reduce(comm, x, out, op): chorus.Comm.all_reduce's checks and call (out None: in "
     "place); returns out"},
    {"np_reduce", asCFunction<npReduceFast>(), METH_FASTCALL,
     "np_reduce(comm, x, out, op, root): chorus.Comm.reduce's checks and call; returns out"},
    {"np_broadcast", asCFunction<npBroadcastFast>(), METH_FASTCALL,
     "np_broadcast(comm, x, out, root): chorus.Comm.broadcast's checks and call; returns out"},
    {nullptr, nullptr, 0, nullptr}};

// ---- the other numpy calls (chorus.Comm.all_gather ... recv) ----------------------------------
// Checked as npSameShape checks (npArg, npOut, opOf), so that every numpy argument is checked in
// this file; chorus.Comm passes its arguments through. out None: a new array of x's dtype.

int commRank(chorusComm_t h) {
  int r = -1;
  check(chorusCommUserRank(h, &r), h);
  return r;
}

int commSize(chorusComm_t h) {
  int n = 0;
  check(chorusCommCount(h, &n), h);
  return n;
}

std::vector<Py_ssize_t> shapeOf(const NpArray* a) {
  return std::vector<Py_ssize_t>(a->dimensions, a->dimensions + a->nd);
}

// out checked for the `shape` of the result (npOut), or, when None, made: o holds it.
NpArg outFor(chorusComm_t h, const char* call, const NpArg& x, py::handle out,
             const std::vector<Py_ssize_t>& shape, bool typed, py::object& o) {
  size_t elements = 1;
  for (Py_ssize_t d : shape) elements *= size_t(d);
  if (out.is_none()) {
    py::tuple t(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
    o = py::module_::import("numpy").attr("empty")(t, py::handle(x.a->descr));
  } else {
    o = py::reinterpret_borrow<py::object>(out);
  }
  return npOut(h, call, x, o.ptr(), elements, typed);
}

// The shape of one of the `size` equal blocks of x (`elements` long): x.shape[1:] when x.shape[0]
// is the size, else flat.
std::vector<Py_ssize_t> blockShape(chorusComm_t h, const char* call, const NpArg& x,
                                   size_t elements, int size) {
  if (elements % size_t(size) != 0)
    argError(h, call,
             "x holds " + std::to_string(elements) + " elements, not " + std::to_string(size) +
                 " equal blocks");
  if (x.a->nd > 0 && x.a->dimensions[0] == size)
    return std::vector<Py_ssize_t>(x.a->dimensions + 1, x.a->dimensions + x.a->nd);
  return {Py_ssize_t(elements / size_t(size))};
}

// Runs a call without the GIL; a failure raises.
template <class F>
void runNoGil(chorusComm_t h, F call) {
  chorusResult_t r;
  {
    py::gil_scoped_release nogil;
    r = call();
  }
  check(r, h);
}

py::object npAllGather(Comm& c, py::handle x, py::handle out) {
  static constexpr const char* call = "all_gather";
  chorusComm_t h = c.get();
  const NpArg s = npArg(h, call, "x", x.ptr(), false, false);
  std::vector<Py_ssize_t> shape = shapeOf(s.a);
  shape.insert(shape.begin(), commSize(h));
  py::object o;
  const NpArg r = outFor(h, call, s, out, shape, false, o);
  runNoGil(h,
           [&] { return chorusAllGather(s.a->data, r.a->data, s.count, chorusInt8, h, nullptr); });
  return o;
}

py::object npReduceScatter(Comm& c, py::handle x, py::handle out, py::handle op) {
  static constexpr const char* call = "reduce_scatter";
  chorusComm_t h = c.get();
  const NpArg s = npArg(h, call, "x", x.ptr(), false);
  const std::vector<Py_ssize_t> shape = blockShape(h, call, s, s.count, commSize(h));
  py::object o;
  const NpArg r = outFor(h, call, s, out, shape, true, o);
  const auto rop = chorusRedOp_t(opOf(h, call, op.ptr()));
  runNoGil(h, [&] {
    return chorusReduceScatter(s.a->data, r.a->data, r.count, chorusDataType_t(s.type), rop, h,
                               nullptr);
  });
  return o;
}

py::object npAllToAll(Comm& c, py::handle x, py::handle out) {
  static constexpr const char* call = "all_to_all";
  chorusComm_t h = c.get();
  const NpArg s = npArg(h, call, "x", x.ptr(), false, false);
  const int n = commSize(h);
  if (s.count % size_t(n) != 0)
    argError(h, call, "x is not " + std::to_string(n) + " equal blocks");
  py::object o;
  const NpArg r = outFor(h, call, s, out, shapeOf(s.a), false, o);
  runNoGil(h, [&] {
    return chorusAlltoAll(s.a->data, r.a->data, s.count / size_t(n), chorusInt8, h, nullptr);
  });
  return o;
}

py::object npGather(Comm& c, py::handle x, py::handle out, int root) {
  static constexpr const char* call = "gather";
  chorusComm_t h = c.get();
  const NpArg s = npArg(h, call, "x", x.ptr(), false, false);
  py::object o = py::none();
  void* recv = nullptr;
  if (commRank(h) == root) {
    std::vector<Py_ssize_t> shape = shapeOf(s.a);
    shape.insert(shape.begin(), commSize(h));
    recv = outFor(h, call, s, out, shape, false, o).a->data;
  }
  runNoGil(h, [&] { return chorusGather(s.a->data, recv, s.count, chorusInt8, root, h, nullptr); });
  return o;
}

py::object npScatter(Comm& c, py::handle x, py::handle out, int root) {
  static constexpr const char* call = "scatter";
  chorusComm_t h = c.get();
  const void* send = nullptr;
  py::object o;
  NpArg r{};
  if (commRank(h) == root) {
    const NpArg s = npArg(h, call, "x", x.ptr(), false, false);
    const std::vector<Py_ssize_t> shape =
        blockShape(h, call, s, s.count / perElement(s, false), commSize(h));
    r = outFor(h, call, s, out, shape, false, o);
    send = s.a->data;
  } else if (out.is_none()) {
    argError(h, call, "out is required on ranks other than the root");
  } else {
    r = npArg(h, call, "out", out.ptr(), true, false);
    o = py::reinterpret_borrow<py::object>(out);
  }
  runNoGil(h,
           [&] { return chorusScatter(send, r.a->data, r.count, chorusInt8, root, h, nullptr); });
  return o;
}

void npSend(Comm& c, py::handle x, int peer) {
  chorusComm_t h = c.get();
  const NpArg s = npArg(h, "send", "x", x.ptr(), false, false);
  runNoGil(h, [&] { return chorusSend(s.a->data, s.count, chorusInt8, peer, h, nullptr); });
}

py::object npRecv(Comm& c, py::handle x, int peer) {
  chorusComm_t h = c.get();
  const NpArg r = npArg(h, "recv", "x", x.ptr(), true, false);
  runNoGil(h, [&] { return chorusRecv(r.a->data, r.count, chorusInt8, peer, h, nullptr); });
  return py::reinterpret_borrow<py::object>(x);
}

}  // namespace

PYBIND11_MODULE(_chorus, m) {
  m.doc() = "Chorus C API on Python buffers (use the chorus package, not this module)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CallError& e) {
      raiseCallError(e);
    }
  });
  m.def("_set_error_factory", [](py::object f) { gErrorFactory = std::move(f); });
  m.add_object("_cleanup", py::capsule([]() { gErrorFactory = py::object(); }));

  m.def("version", []() {
    int v = 0;
    chorusGetVersion(&v);
    return v;
  });
  // chorusGetBuildInfo()'s key=value lines (python -m chorus).
  m.def("build_info", []() { return std::string(chorusGetBuildInfo()); });
  // (launcher, rank, size, local rank) variable names, in the order chorusCommInitFromEnv tries
  // them; chorus.torch fills torch's env:// variables from the same list.
  py::list launchers;
  for (const chorus::LauncherVariables& l : chorus::kLauncherVariables)
    launchers.append(py::make_tuple(l.launcher, l.rank, l.size, l.localRank));
  m.attr("LAUNCHER_VARIABLES") = py::tuple(launchers);
  // The root address under srun (src/core/slurm_env.h), for chorus.torch.env_from_launcher.
  m.def("slurm_first_host", [](const std::string& list) { return chorus::slurmFirstHost(list); });
  m.def("slurm_root_port",
        [](uint64_t job, uint64_t step) { return chorus::slurmRootPort(job, step); });
  // chorusResult_t and chorusRedOp_t by name (include/chorus/chorus.h): chorus's exception
  // classes and op constants are made from these.
  py::dict results;
  for (const auto& [name, r] : {std::pair{"chorusSuccess", chorusSuccess},
                                {"chorusUnhandledCudaError", chorusUnhandledCudaError},
                                {"chorusSystemError", chorusSystemError},
                                {"chorusInternalError", chorusInternalError},
                                {"chorusInvalidArgument", chorusInvalidArgument},
                                {"chorusInvalidUsage", chorusInvalidUsage},
                                {"chorusRemoteError", chorusRemoteError},
                                {"chorusInProgress", chorusInProgress},
                                {"chorusTimeout", chorusTimeout}})
    results[name] = int(r);
  m.attr("RESULTS") = results;
  py::dict ops;
  for (const auto& [name, o] : {std::pair{"chorusSum", chorusSum},
                                {"chorusProd", chorusProd},
                                {"chorusMax", chorusMax},
                                {"chorusMin", chorusMin},
                                {"chorusAvg", chorusAvg}})
    ops[name] = int(o);
  m.attr("RED_OPS") = ops;
  m.def("error_string", [](int r) { return std::string(chorusGetErrorString(chorusResult_t(r))); });
  m.def("type_size", [](int t) { return chorusTypeSize(chorusDataType_t(t)); });

  m.def("get_unique_id", []() {
    chorusUniqueId id;
    check(chorusGetUniqueId(&id), nullptr);
    return idBytes(id);
  });
  m.def("unique_id_from_env", []() {
    chorusUniqueId id;
    int procRank = 0, nprocs = 1;
    {
      py::gil_scoped_release nogil;
      check(chorusUniqueIdFromEnv(&id, &procRank, &nprocs), nullptr);
    }
    return py::make_tuple(idBytes(id), procRank, nprocs);
  });

  py::class_<Comm>(m, "CommHandle")
      .def_property_readonly("rank",
                             [](const Comm& c) {
                               int r = -1;
                               check(chorusCommUserRank(c.get(), &r), c.c);
                               return r;
                             })
      .def_property_readonly("size",
                             [](const Comm& c) {
                               int n = 0;
                               check(chorusCommCount(c.get(), &n), c.c);
                               return n;
                             })
      .def_property_readonly("closed", [](const Comm& c) { return c.c == nullptr; })
      .def("finalize",
           [](Comm& c) {
             chorusComm_t h = c.get();
             py::gil_scoped_release nogil;
             check(chorusCommFinalize(h), h);
           })
      .def("destroy",
           [](Comm& c) {
             chorusComm_t h = c.c;
             c.c = nullptr;
             py::gil_scoped_release nogil;
             check(chorusCommDestroy(h), nullptr);
           })
      .def("abort",
           [](Comm& c) {
             chorusComm_t h = c.c;
             c.c = nullptr;
             py::gil_scoped_release nogil;
             check(chorusCommAbort(h), nullptr);
           })
      .def("async_error", [](const Comm& c) {
        chorusResult_t r = chorusSuccess;
        check(chorusCommGetAsyncError(c.get(), &r), c.c);
        return int(r);
      });

  m.def(
      "init_rank",
      [](int nranks, const py::bytes& id, int rank, int timeoutMs) {
        chorusUniqueId uid = idFromBytes(id);
        auto* comm = new Comm;
        chorusResult_t r;
        {
          py::gil_scoped_release nogil;
          chorusConfig_t cfg = CHORUS_CONFIG_INITIALIZER;
          cfg.timeoutMs = timeoutMs;
          r = chorusCommInitRankConfig(&comm->c, nranks, uid, rank, &cfg);
        }
        if (r != chorusSuccess) {
          delete comm;
          check(r, nullptr);
        }
        return comm;
      },
      py::arg("nranks"), py::arg("id"), py::arg("rank"), py::arg("timeout_ms") = -1);
  m.def("init_from_env", []() {
    auto* comm = new Comm;
    chorusResult_t r;
    {
      py::gil_scoped_release nogil;
      r = chorusCommInitFromEnv(&comm->c);
    }
    if (r != chorusSuccess) {
      delete comm;
      check(r, nullptr);
    }
    return comm;
  });
  m.def("init_all", [](int n) {
    if (n <= 0) throw CallError{chorusInvalidArgument, "chorus: init_all: n must be positive"};
    std::vector<chorusComm_t> hs(size_t(n), nullptr);
    {
      py::gil_scoped_release nogil;
      check(chorusCommInitAll(hs.data(), n, nullptr), nullptr);
    }
    py::list out;
    for (auto h : hs) {
      auto* c = new Comm;
      c->c = h;
      out.append(py::cast(c, py::return_value_policy::take_ownership));
    }
    return out;
  });
  m.def("split", [](Comm& parent, int color, int key) -> py::object {
    chorusComm_t h = parent.get(), out = nullptr;
    {
      py::gil_scoped_release nogil;
      check(chorusCommSplit(h, color, key, &out, nullptr), h);
    }
    if (out == nullptr) return py::none();
    auto* c = new Comm;
    c->c = out;
    return py::cast(c, py::return_value_policy::take_ownership);
  });
  m.def("shrink", [](Comm& parent, std::vector<int> exclude, bool abort) -> py::object {
    chorusComm_t h = parent.get(), out = nullptr;
    {
      py::gil_scoped_release nogil;
      check(chorusCommShrink(h, exclude.data(), int(exclude.size()), &out, nullptr,
                             abort ? CHORUS_SHRINK_ABORT : CHORUS_SHRINK_DEFAULT),
            h);
    }
    if (out == nullptr) return py::none();
    auto* c = new Comm;
    c->c = out;
    return py::cast(c, py::return_value_policy::take_ownership);
  });

  // Registered memory (chorusMemAlloc, chorusCommRegister): a block of memory the node's other
  // processes can map, freed when the last Python reference to it goes (numpy arrays built on
  // it hold one).
  py::class_<MemBlock>(m, "MemBlock", py::buffer_protocol())
      .def_buffer([](MemBlock& b) {
        return py::buffer_info(b.p, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {py::ssize_t(b.bytes)}, {py::ssize_t(1)});
      })
      .def_property_readonly("nbytes", [](const MemBlock& b) { return b.bytes; });
  m.def("mem_alloc", [](size_t bytes) {
    auto b = std::make_unique<MemBlock>();
    void* p = nullptr;
    check(chorusMemAlloc(&p, bytes), nullptr);
    b->p = p;
    b->bytes = bytes;
    return b;
  });
  // Collective: every rank's thread must be able to run, so the GIL is released.
  m.def("comm_register", [](Comm& c, py::handle buf) {
    const Buf b = bufferOf(buf, "register: buffer");
    chorusComm_t h = c.get();
    void* handle = nullptr;
    {
      py::gil_scoped_release nogil;
      check(chorusCommRegister(h, b.ptr, b.bytes, &handle), h);
    }
    return reinterpret_cast<uintptr_t>(handle);
  });
  m.def("comm_deregister", [](Comm& c, uintptr_t handle) {
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusCommDeregister(h, reinterpret_cast<void*>(handle)), h);
  });

  // The numpy collectives (chorus.Comm's methods): all_reduce, reduce and broadcast are plain
  // METH_FASTCALL functions (gFastMethods), the others pybind11 ones; every one checks its
  // arguments (npArg).
  gCommType = reinterpret_cast<PyTypeObject*>(py::type::of<Comm>().ptr());
  for (PyMethodDef* d = gFastMethods; d->ml_name != nullptr; ++d)
    m.attr(d->ml_name) = py::reinterpret_steal<py::object>(PyCFunction_NewEx(d, nullptr, nullptr));
  m.def("np_all_gather", &npAllGather);
  m.def("np_reduce_scatter", &npReduceScatter);
  m.def("np_all_to_all", &npAllToAll);
  m.def("np_gather", &npGather);
  m.def("np_scatter", &npScatter);
  m.def("np_send", &npSend);
  m.def("np_recv", &npRecv);
  m.def("group_start", []() { check(chorusGroupStart(), nullptr); });
  m.def("group_end", []() {
    py::gil_scoped_release nogil;
    check(chorusGroupEnd(), nullptr);
  });
}
