// chorus._chorus: the C API on Python buffers (numpy arrays), with the GIL released during every
// call that may wait (np_all_reduce: unless the message is small and no other Python thread
// exists). The friendly layer (chorus.Comm, dtype and shape rules, exceptions) is
// python/chorus/__init__.py; this file checks buffers and calls the library, and makes every
// check of chorus.Comm.all_reduce itself (np_all_reduce), where microseconds matter.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>

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

// A contiguous buffer seen through the buffer protocol, with its element type.
struct Buf {
  void* ptr = nullptr;
  size_t bytes = 0;
  size_t count = 0;
  chorusDataType_t type = chorusInt8;
};

chorusDataType_t typeOfFormat(const std::string& fmt, size_t itemsize, const char* what) {
  // numpy's struct-style format characters; '<' / '=' / '@' native prefixes are stripped.
  std::string f = fmt;
  while (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f.erase(0, 1);
  if (f.size() == 1) {
    const char k = f[0];
    const bool isSigned = k == 'b' || k == 'h' || k == 'i' || k == 'l' || k == 'q';
    const bool isUnsigned = k == 'B' || k == 'H' || k == 'I' || k == 'L' || k == 'Q';
    if (k == 'e') return chorusFloat16;
    if (k == 'f') return chorusFloat32;
    if (k == 'd') return chorusFloat64;
    if (isSigned || isUnsigned) {
      switch (itemsize) {
        case 1:
          return isSigned ? chorusInt8 : chorusUint8;
        case 4:
          return isSigned ? chorusInt32 : chorusUint32;
        case 8:
          return isSigned ? chorusInt64 : chorusUint64;
        default:
          break;
      }
    }
  }
  throw CallError{chorusInvalidArgument,
                  std::string("chorus: ") + what + ": unsupported element type '" + fmt +
                      "' (int8, uint8, int32, uint32, int64, uint64, float16, float32, float64; "
                      "bfloat16 through chorus.torch)"};
}

// Reads a buffer; `writable` for outputs. `typeOverride` >= 0 reinterprets the element type
// (bytes of copy-only collectives, bfloat16 held in uint16 arrays).
Buf bufferOf(const py::handle& obj, bool writable, const char* what, int typeOverride) {
  Buf b;
  if (obj.is_none()) return b;
  Py_buffer view;
  const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view, flags) != 0) {
    PyErr_Clear();
    throw CallError{chorusInvalidArgument,
                    std::string("chorus: ") + what + " must be a C-contiguous" +
                        (writable ? ", writable" : "") + " buffer (a numpy array)"};
  }
  b.ptr = view.buf;
  b.bytes = size_t(view.len);
  const std::string fmt = view.format ? view.format : "B";
  const size_t itemsize = size_t(view.itemsize);
  PyBuffer_Release(&view);  // the caller keeps the object (and so the memory) alive
  if (typeOverride >= 0) {
    b.type = chorusDataType_t(typeOverride);
    const size_t sz = chorusTypeSize(b.type);
    if (sz == 0 || b.bytes % sz != 0)
      throw CallError{chorusInvalidArgument, std::string("chorus: ") + what + ": " +
                                                 std::to_string(b.bytes) +
                                                 " bytes is not a whole number of elements"};
    b.count = b.bytes / sz;
  } else {
    b.type = typeOfFormat(fmt, itemsize, what);
    b.count = b.bytes / itemsize;
  }
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
    r = npArg(h, call, "out", out, true, typed);
    const bool sameType =
        typed ? r.type == s.type : PyObject_RichCompareBool(r.a->descr, s.a->descr, Py_EQ) == 1;
    if (!sameType)
      argError(h, call, "out has dtype " + dtypeName(r.a) + ", expected " + dtypeName(s.a));
    if (r.count != s.count) {
      const size_t per =
          typed ? 1
                : std::max<size_t>(
                      1, size_t(py::handle(s.a->descr).attr("itemsize").cast<Py_ssize_t>()));
      argError(h, call,
               "out holds " + std::to_string(r.count / per) + " elements, expected " +
                   std::to_string(s.count / per));
    }
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
    Buf b = bufferOf(buf, false, "register: buffer", int(chorusUint8));
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

  // Collectives. Buffers are Python objects (None where a rank passes none); `t` >= 0 forces
  // the element type. Counts follow the C API.
  m.def("all_reduce", [](Comm& c, py::handle send, py::handle recv, int op, int t) {
    Buf s = bufferOf(send, false, "all_reduce: send buffer", t);
    Buf r = bufferOf(recv, true, "all_reduce: output", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusAllReduce(s.ptr, r.ptr, s.count, s.type, chorusRedOp_t(op), h, nullptr), h);
  });
  gCommType = reinterpret_cast<PyTypeObject*>(py::type::of<Comm>().ptr());
  for (PyMethodDef* d = gFastMethods; d->ml_name != nullptr; ++d)
    m.attr(d->ml_name) = py::reinterpret_steal<py::object>(PyCFunction_NewEx(d, nullptr, nullptr));
  m.def("broadcast", [](Comm& c, py::handle send, py::handle recv, size_t count, int root, int t) {
    Buf s = bufferOf(send, false, "broadcast: send buffer", t);
    Buf r = bufferOf(recv, true, "broadcast: output", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusBroadcast(s.ptr, r.ptr, count, r.type, root, h, nullptr), h);
  });
  m.def("reduce",
        [](Comm& c, py::handle send, py::handle recv, size_t count, int op, int root, int t) {
          Buf s = bufferOf(send, false, "reduce: send buffer", t);
          Buf r = bufferOf(recv, true, "reduce: output", t);
          chorusComm_t h = c.get();
          py::gil_scoped_release nogil;
          check(chorusReduce(s.ptr, r.ptr, count, s.type, chorusRedOp_t(op), root, h, nullptr), h);
        });
  m.def("all_gather", [](Comm& c, py::handle send, py::handle recv, size_t count, int t) {
    Buf s = bufferOf(send, false, "all_gather: send buffer", t);
    Buf r = bufferOf(recv, true, "all_gather: output", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusAllGather(s.ptr, r.ptr, count, r.type, h, nullptr), h);
  });
  m.def("reduce_scatter",
        [](Comm& c, py::handle send, py::handle recv, size_t count, int op, int t) {
          Buf s = bufferOf(send, false, "reduce_scatter: send buffer", t);
          Buf r = bufferOf(recv, true, "reduce_scatter: output", t);
          chorusComm_t h = c.get();
          py::gil_scoped_release nogil;
          check(chorusReduceScatter(s.ptr, r.ptr, count, s.type, chorusRedOp_t(op), h, nullptr), h);
        });
  m.def("all_to_all", [](Comm& c, py::handle send, py::handle recv, size_t count, int t) {
    Buf s = bufferOf(send, false, "all_to_all: send buffer", t);
    Buf r = bufferOf(recv, true, "all_to_all: output", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusAlltoAll(s.ptr, r.ptr, count, s.type, h, nullptr), h);
  });
  m.def("gather", [](Comm& c, py::handle send, py::handle recv, size_t count, int root, int t) {
    Buf s = bufferOf(send, false, "gather: send buffer", t);
    Buf r = bufferOf(recv, true, "gather: output", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusGather(s.ptr, r.ptr, count, s.type, root, h, nullptr), h);
  });
  m.def("scatter", [](Comm& c, py::handle send, py::handle recv, size_t count, int root, int t) {
    Buf s = bufferOf(send, false, "scatter: send buffer", t);
    Buf r = bufferOf(recv, true, "scatter: output", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusScatter(s.ptr, r.ptr, count, r.type, root, h, nullptr), h);
  });
  m.def("send", [](Comm& c, py::handle buf, int peer, int t) {
    Buf b = bufferOf(buf, false, "send: buffer", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusSend(b.ptr, b.count, b.type, peer, h, nullptr), h);
  });
  m.def("recv", [](Comm& c, py::handle buf, int peer, int t) {
    Buf b = bufferOf(buf, true, "recv: buffer", t);
    chorusComm_t h = c.get();
    py::gil_scoped_release nogil;
    check(chorusRecv(b.ptr, b.count, b.type, peer, h, nullptr), h);
  });
  m.def("group_start", []() { check(chorusGroupStart(), nullptr); });
  m.def("group_end", []() {
    py::gil_scoped_release nogil;
    check(chorusGroupEnd(), nullptr);
  });
}
