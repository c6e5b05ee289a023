// SPDX-License-Identifier: Apache-2.0
// papccl._papccl_torch: the process group class and the unique id, for python/papccl/torch.py.
#include <torch/python.h>

#include <cstring>

#include "ProcessGroupPapccl.hpp"

namespace py = pybind11;
using papccl_torch::ArrivalRecord;
using papccl_torch::ProcessGroupPapccl;

namespace {

py::dict recordDict(const ArrivalRecord& a) {
  py::dict d;
  d["seq"] = a.seq;
  d["op"] = a.op;
  d["algo"] = a.algo;
  d["complete"] = a.complete;
  d["late_rank"] = a.lateRank;
  d["skew_us"] = a.skewUs;
  d["tail_us"] = a.tailUs;
  d["time_in_coll_us"] = a.timeInCollUs;
  d["plan_wait_us"] = a.planWaitUs;
  d["order"] = a.order;
  d["lateness_us"] = a.latenessUs;
  return d;
}

py::dict statsDict(const papcclPapStats& s) {
  int n = std::min(s.nranks, PAPCCL_PAP_STATS_MAX_RANKS);
  py::dict d;
  d["nranks"] = s.nranks;
  d["ops"] = s.ops;
  d["complete_ops"] = s.completeOps;
  d["pap_ops"] = s.papOps;
  d["avg_skew_us"] = s.avgSkewUs;
  d["max_skew_us"] = s.maxSkewUs;
  d["avg_tail_us"] = s.avgTailUs;
  d["avg_time_in_coll_us"] = s.avgTimeInCollUs;
  d["late_count"] = std::vector<uint64_t>(s.lateCount, s.lateCount + n);
  d["avg_lateness_us"] = std::vector<double>(s.avgLatenessUs, s.avgLatenessUs + n);
  d["habitual_late_rank"] = s.habitualLateRank;
  d["expected_wait_us"] = s.lastExpectedWaitUs;
  // Ops by the path papccl chose for them (papcclPath_t), the last one's and why.
  static const char* const kPaths[papcclNumPaths] = {"local", "board", "flat",
                                                     "arena", "hier",  "p2p"};
  py::dict paths;
  for (int p = 0; p < papcclNumPaths; p++)
    paths[kPaths[p]] = s.pathOps[p];
  d["path_ops"] = paths;
  d["last_path"] = s.lastPath >= 0 && s.lastPath < papcclNumPaths ? kPaths[s.lastPath] : "?";
  d["last_path_why"] = std::string(s.lastPathWhy);
  return d;
}

// A new rank of a grow (papcclCommGrow with no comm): its group of `size`.
c10::intrusive_ptr<ProcessGroupPapccl> growNewRank(const std::string& uid, int rank, int size,
                                                   int64_t timeoutMs) {
  papcclUniqueId id;
  TORCH_CHECK(uid.size() == sizeof(id.internal), "papccl grow on new rank ", rank, ": the id has ",
              uid.size(), " bytes, expected ", sizeof(id.internal));
  std::memcpy(id.internal, uid.data(), sizeof(id.internal));
  papcclComm_t comm = nullptr;
  papcclResult_t r;
  {
    py::gil_scoped_release nogil;
    r = papcclCommGrow(nullptr, size, &id, rank, &comm, nullptr);
  }
  TORCH_CHECK(r == papcclSuccess, "papccl grow on new rank ", rank, " of ", size,
              " failed: ", papcclGetErrorString(r), ": ", papcclGetLastError(nullptr));
  return c10::make_intrusive<ProcessGroupPapccl>(comm, rank, size,
                                                 std::chrono::milliseconds(timeoutMs));
}

}  // namespace

PYBIND11_MODULE(_papccl_torch, m) {
  m.doc() = "papccl's torch.distributed process group (import papccl.torch to register it)";
  // The base class must be known to pybind before ours derives from it.
  py::module::import("torch.distributed");

  m.def("unique_id", [] {
    papcclUniqueId id;
    papcclResult_t r = papcclGetUniqueId(&id);
    TORCH_CHECK(r == papcclSuccess, "papccl: papcclGetUniqueId failed: ", papcclGetErrorString(r),
                ": ", papcclGetLastError(nullptr));
    return py::bytes(id.internal, sizeof(id.internal));
  });
  m.def("grow_new_rank", &growNewRank, py::arg("unique_id"), py::arg("rank"), py::arg("size"),
        py::arg("timeout_ms"));
#if defined(PAPCCL_TORCH_CUDA)
  m.attr("cuda") = true;  // this build takes CUDA tensors
#else
  m.attr("cuda") = false;
#endif
  m.def("version", [] {
    int v = 0;
    papcclGetVersion(&v);
    return v;
  });

  py::class_<ProcessGroupPapccl, c10d::Backend, c10::intrusive_ptr<ProcessGroupPapccl>>(
      m, "ProcessGroupPapccl")
      .def(py::init([](const std::string& uid, int rank, int size, int64_t timeoutMs) {
             return c10::make_intrusive<ProcessGroupPapccl>(uid, rank, size,
                                                            std::chrono::milliseconds(timeoutMs));
           }),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("timeout_ms"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("timeout_ms",
                             [](ProcessGroupPapccl& pg) { return pg.timeout().count(); })
      .def("_pap_stats",
           [](ProcessGroupPapccl& pg) {
             papcclPapStats s;
             {
               py::gil_scoped_release nogil;
               s = pg.papStats();
             }
             return statsDict(s);
           })
      .def(
          "_arrival_history",
          [](ProcessGroupPapccl& pg, size_t last) {
            std::vector<ArrivalRecord> h;
            {
              py::gil_scoped_release nogil;
              h = pg.arrivalHistory(last);
            }
            py::list out;
            for (const auto& a : h)
              out.append(recordDict(a));
            return out;
          },
          py::arg("last"))
      .def("_abort", &ProcessGroupPapccl::abortComm, py::arg("why"),
           py::call_guard<py::gil_scoped_release>())
      .def("_grow_id", [](ProcessGroupPapccl& pg) { return py::bytes(pg.growId()); })
      .def(
          "_grow",
          [](ProcessGroupPapccl& pg, int size, const std::string& uid, int64_t timeoutMs) {
            py::gil_scoped_release nogil;
            return pg.grow(size, uid, std::chrono::milliseconds(timeoutMs));
          },
          py::arg("size"), py::arg("unique_id"), py::arg("timeout_ms"))
      // new_group on a default group bound to a device (init_process_group(device_id=...)):
      // torch hands the members' creator the parent as split_from (papccl.torch then calls
      // _split) and has every other rank call perform_nocolor_split, as it does for NCCL's.
      .def(
          "_split",
          [](ProcessGroupPapccl& pg, const std::vector<int>& ranks, int64_t timeoutMs) {
            c10::intrusive_ptr<c10d::Backend> child;
            {
              py::gil_scoped_release nogil;
              child = pg.split(c10::intrusive_ptr<c10d::Store>(), ranks,
                               c10::make_intrusive<c10d::Backend::Options>(
                                   "papccl", std::chrono::milliseconds(timeoutMs)));
            }
            return c10::static_intrusive_pointer_cast<ProcessGroupPapccl>(child);
          },
          py::arg("ranks"), py::arg("timeout_ms"))
      .def(
          "perform_nocolor_split",
          [](ProcessGroupPapccl& pg, const py::object& device) {
            (void)device;  // one communicator serves every device of the group
            py::gil_scoped_release nogil;
            pg.split(c10::intrusive_ptr<c10d::Store>(), {}, nullptr);
          },
          py::arg("device"));
}
