// The Python binding of the C++ core (nanobind). Arrays are copied into the core's vectors while
// the GIL is held; the solvers run with the GIL released, so threads can solve concurrently.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "remat/chain.hpp"
#include "remat/eager.hpp"
#include "remat/errors.hpp"
#include "remat/knapsack.hpp"
#include "remat/min_cut.hpp"
#include "remat/offload.hpp"

#ifndef REMAT_VERSION
#error "REMAT_VERSION must be defined (CMakeLists.txt passes the project version)"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using Vector = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::vector<double> to_vector(const Vector& array) {
  return std::vector<double>(array.data(), array.data() + array.shape(0));
}

remat::KnapsackProblem make_problem(const Vector& memory, const Vector& runtime, double max_memory,
                                    double scale) {
  return remat::quantize({to_vector(memory), to_vector(runtime), max_memory, scale});
}

nb::dict result_dict(const remat::KnapsackResult& r) {
  nb::dict out;
  remat::visit_fields(r, [&](const char* name, const auto& value) { out[name] = value; });
  return out;
}

nb::dict solve(const Vector& memory, const Vector& runtime, double max_memory,
               const std::string& solver, double scale, std::optional<double> time_limit,
               std::size_t max_planner_bytes, bool refuse_on_memory_limit) {
  const remat::KnapsackProblem problem = make_problem(memory, runtime, max_memory, scale);
  remat::SolveOptions options;
  if (refuse_on_memory_limit) options.on_memory_limit = remat::OnMemoryLimit::kRefuse;
  options.solver = remat::parse_solver(solver);
  options.time_limit_seconds = time_limit;
  options.max_planner_bytes = max_planner_bytes;
  remat::KnapsackResult result;
  {
    nb::gil_scoped_release release;
    result = remat::solve(problem, options);
  }
  return result_dict(result);
}

// With the GIL released, Python runs no signal handler: this asks it, about every 50 ms (the
// core's period), so that Ctrl-C stops a long call. Off the main thread Python reports none.
bool python_signal_pending() {
  nb::gil_scoped_acquire acquire;
  return PyErr_CheckSignals() != 0;
}

std::tuple<std::vector<std::int64_t>, std::vector<double>, std::int64_t> pareto(
    const Vector& memory, const Vector& runtime, double max_memory, double scale,
    std::size_t max_planner_bytes, std::optional<double> time_limit) {
  const remat::KnapsackProblem problem = make_problem(memory, runtime, max_memory, scale);
  std::vector<remat::ParetoPoint> front;
  try {
    nb::gil_scoped_release release;
    front = remat::pareto_front(problem, max_planner_bytes, time_limit, python_signal_pending);
  } catch (const remat::Interrupted&) {
    throw nb::python_error();  // the handler's exception (KeyboardInterrupt) is set
  }
  std::vector<std::int64_t> budgets;
  std::vector<double> values;
  for (const auto& point : front) {
    budgets.push_back(point.budget_quanta);
    values.push_back(point.max_runtime);
  }
  return {budgets, values, problem.capacity};
}

using ActionTuple = std::tuple<std::string, std::int64_t, std::int64_t, bool>;

ActionTuple action_tuple(const remat::chain::Action& a) {
  switch (a.kind) {
    case remat::chain::Action::Kind::kForward:
      return {"forward", a.first, a.last, a.keep_input};
    case remat::chain::Action::Kind::kBackward:
      return {"backward", a.first, a.last, true};
    case remat::chain::Action::Kind::kFree:
      return {"free", a.first, a.last, true};
  }
  return {"?", 0, 0, true};
}

// A chain schedule as Python sees it: the simulator's figures, the actions, and (plans only) the
// planner's unit and prediction.
struct ChainSchedule {
  std::int64_t memory = 0, recompute = 0, actions = 0, memory_bytes = 0;
  double recompute_time = 0;
  std::int64_t unit_bytes = 0, slots = 0;
  double predicted_recompute_time = 0;
  std::vector<ActionTuple> schedule;
};

ChainSchedule simulated(const remat::chain::Simulation& s) {
  ChainSchedule out;
  out.memory = s.memory;
  out.recompute = s.recompute;
  out.actions = s.actions;
  out.memory_bytes = s.memory_bytes;
  out.recompute_time = s.recompute_time;
  return out;
}

remat::chain::ChainProfile make_profile(std::int64_t input_bytes,
                                        const std::vector<std::int64_t>& activation_bytes,
                                        const std::vector<double>& forward_time) {
  remat::chain::ChainProfile profile;
  profile.activation_bytes.push_back(input_bytes);
  profile.activation_bytes.insert(profile.activation_bytes.end(), activation_bytes.begin(),
                                  activation_bytes.end());
  profile.forward_time.push_back(0.0);
  profile.forward_time.insert(profile.forward_time.end(), forward_time.begin(), forward_time.end());
  profile.validate();
  return profile;
}

ChainSchedule plan_profile(std::int64_t input_bytes, const std::vector<std::int64_t>& activation_bytes,
                      const std::vector<double>& forward_time, std::int64_t budget,
                      std::int64_t slots, std::size_t max_planner_bytes) {
  const auto profile = make_profile(input_bytes, activation_bytes, forward_time);
  std::vector<ActionTuple> schedule;
  remat::chain::ProfilePlan plan;
  {
    nb::gil_scoped_release release;
    plan = remat::chain::plan_profile(
        profile, budget, slots,
        max_planner_bytes ? max_planner_bytes : remat::default_max_planner_bytes(),
        [&](const remat::chain::Action& a) { schedule.push_back(action_tuple(a)); });
  }
  ChainSchedule out = simulated(plan.simulation);
  out.unit_bytes = plan.unit_bytes;
  out.slots = plan.slots;
  out.predicted_recompute_time = plan.predicted_recompute_time;
  out.schedule = std::move(schedule);
  return out;
}

ChainSchedule simulate_profile(std::int64_t input_bytes,
                          const std::vector<std::int64_t>& activation_bytes,
                          const std::vector<double>& forward_time, const std::string& strategy,
                          std::int64_t parameter) {
  const auto profile = make_profile(input_bytes, activation_bytes, forward_time);
  std::vector<ActionTuple> schedule;
  const auto sim = remat::chain::simulate(
      profile, remat::chain::parse_strategy(strategy), parameter,
      [&](const remat::chain::Action& a) { schedule.push_back(action_tuple(a)); });
  ChainSchedule out = simulated(sim);
  out.schedule = std::move(schedule);
  return out;
}

// (held_bytes, recompute_time): a selective checkpoint option of a layer.
using EagerOption = std::tuple<std::int64_t, double>;
// (saved_bytes, output_bytes, saves_output, forward_time, options).
using EagerLayer = std::tuple<std::int64_t, std::int64_t, bool, double, std::vector<EagerOption>>;
// (first, last, depth, option): option -1 re-runs the region whole.
using RegionTuple = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;

remat::eager::Profile make_eager_profile(std::int64_t input_bytes,
                                         const std::vector<EagerLayer>& layers,
                                         double region_overhead, std::int64_t max_region_layers) {
  remat::eager::Profile profile;
  profile.input_bytes = input_bytes;
  profile.region_overhead = region_overhead;
  profile.max_region_layers = max_region_layers;
  for (const auto& [saved, output, saves_output, time, options] : layers) {
    remat::eager::Layer layer{saved, output, saves_output, time};
    for (const auto& [held, recompute] : options) layer.options.push_back({held, recompute});
    profile.layers.push_back(std::move(layer));
  }
  return profile;
}

// An eager plan as Python sees it: the regions as (first, last, depth, option) tuples, and the
// planner's figures.
struct EagerPlan {
  std::vector<RegionTuple> regions;
  std::int64_t peak_bytes = 0;
  double recompute_time = 0;
  std::int64_t minimum_budget = 0, no_checkpoint_bytes = 0, unit_bytes = 0;
};

EagerPlan eager_plan_result(const remat::eager::Plan& plan) {
  EagerPlan out;
  for (const auto& r : plan.regions) out.regions.emplace_back(r.first, r.last, r.depth, r.option);
  out.peak_bytes = plan.evaluation.peak_bytes;
  out.recompute_time = plan.evaluation.recompute_time;
  out.minimum_budget = plan.minimum_budget;
  out.no_checkpoint_bytes = plan.no_checkpoint_bytes;
  out.unit_bytes = plan.unit_bytes;
  return out;
}

EagerPlan eager_plan(std::int64_t input_bytes, const std::vector<EagerLayer>& layers,
                    double region_overhead, std::int64_t max_region_layers, std::int64_t budget,
                    std::int64_t slots, std::size_t max_planner_bytes) {
  const auto profile = make_eager_profile(input_bytes, layers, region_overhead, max_region_layers);
  remat::eager::Plan plan;
  {
    nb::gil_scoped_release release;
    plan = remat::eager::plan(
        profile, budget, slots != 0 ? slots : remat::eager::default_slots(profile.layers.size()),
        max_planner_bytes ? max_planner_bytes : remat::default_max_planner_bytes());
  }
  return eager_plan_result(plan);
}

EagerPlan eager_minimum(std::int64_t input_bytes, const std::vector<EagerLayer>& layers,
                       double region_overhead, std::int64_t max_region_layers) {
  return eager_plan_result(remat::eager::minimum_memory_plan(
      make_eager_profile(input_bytes, layers, region_overhead, max_region_layers)));
}

std::tuple<std::int64_t, double> eager_evaluate(std::int64_t input_bytes,
                                                const std::vector<EagerLayer>& layers,
                                                double region_overhead,
                                                std::int64_t max_region_layers,
                                                const std::vector<RegionTuple>& regions) {
  std::vector<remat::eager::Region> parsed;
  for (const auto& [first, last, depth, option] : regions) {
    parsed.push_back({first, last, depth, option});
  }
  const auto e = remat::eager::evaluate(
      make_eager_profile(input_bytes, layers, region_overhead, max_region_layers), parsed);
  return {e.peak_bytes, e.recompute_time};
}

struct OffloadPlan {
  std::vector<std::tuple<std::string, std::int64_t>> layers;  // (action, option)
  std::int64_t peak_bytes = 0, host_bytes = 0, minimum_budget = 0, unit_bytes = 0;
  double recompute_time = 0, stall_time = 0, copy_time = 0;
};

// Keep, recompute or offload each layer (one layer a region); see remat/offload.hpp.
OffloadPlan offload_plan(std::int64_t input_bytes, const std::vector<EagerLayer>& layers,
                         double region_overhead, std::int64_t budget, double bandwidth,
                         std::int64_t host_budget, const std::vector<double>& backward_time,
                         const std::vector<bool>& offloadable,
                         const std::vector<bool>& input_offloadable, std::int64_t slots,
                         std::int64_t host_slots) {
  const auto profile = make_eager_profile(input_bytes, layers, region_overhead, 1);
  const remat::eager::Transfer transfer{bandwidth, host_budget, backward_time, offloadable,
                                        input_offloadable};
  remat::eager::OffloadPlan plan;
  {
    nb::gil_scoped_release release;
    plan = remat::eager::plan_offload(profile, transfer, budget, slots, host_slots);
  }
  static const char* const kNames[] = {"keep", "region", "option", "offload", "offload_input"};
  OffloadPlan out;
  for (const auto& c : plan.layers) {
    out.layers.emplace_back(kNames[static_cast<int>(c.action)], c.option);
  }
  const auto& e = plan.evaluation;
  out.peak_bytes = e.peak_bytes;
  out.host_bytes = e.host_bytes;
  out.minimum_budget = plan.minimum_budget;
  out.unit_bytes = plan.unit_bytes;
  out.recompute_time = e.recompute_time;
  out.stall_time = e.stall_time;
  out.copy_time = e.copy_time;
  return out;
}

// (unbounded, cut value, per node whether it lies on the sink's side); see remat/min_cut.hpp.
std::tuple<bool, std::int64_t, std::vector<bool>> min_cut(
    std::size_t nodes, const std::vector<std::uint32_t>& tails,
    const std::vector<std::uint32_t>& heads, const std::vector<std::int64_t>& capacities,
    std::uint32_t source, std::uint32_t sink) {
  if (heads.size() != tails.size()) {
    throw remat::InputError("heads", std::nullopt, "must be as long as tails");
  }
  if (capacities.size() != tails.size()) {
    throw remat::InputError("capacities", std::nullopt, "must be as long as tails");
  }
  std::vector<remat::FlowEdge> edges(tails.size());
  for (std::size_t i = 0; i < edges.size(); ++i) edges[i] = {tails[i], heads[i], capacities[i]};
  remat::MinCut cut;
  {
    nb::gil_scoped_release release;
    cut = remat::min_cut(nodes, edges, source, sink);
  }
  return {cut.unbounded, cut.value, std::vector<bool>(cut.sink_side.begin(), cut.sink_side.end())};
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "remat's C++ core: exact knapsack solvers and chain checkpointing planners";
  m.attr("__version__") = REMAT_VERSION;
  nb::exception<remat::InputError>(m, "InputError", PyExc_ValueError);
  static nb::exception<remat::PlannerMemoryError> planner_memory_error(m, "PlannerMemoryError",
                                                                       PyExc_MemoryError);
  static nb::exception<remat::WorkLimitError> work_limit_error(m, "WorkLimitError",
                                                               PyExc_TimeoutError);
  nb::exception<remat::chain::InvalidSchedule>(m, "InvalidSchedule", PyExc_ValueError);
  // Registered last, so tried first: the resource-limit messages suggest other settings, named
  // as Python's arguments (solver="exact", max_planner_bytes=) rather than the CLI's flags.
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const remat::PlannerMemoryError& e) {
      const std::string text = remat::word_options(e.what(), remat::OptionStyle::kPython);
      PyErr_SetString(planner_memory_error.ptr(), text.c_str());
    } catch (const remat::WorkLimitError& e) {
      const std::string text = remat::word_options(e.what(), remat::OptionStyle::kPython);
      PyErr_SetString(work_limit_error.ptr(), text.c_str());
    }
  });

  nb::class_<ChainSchedule>(m, "ChainSchedule", "A chain schedule: its figures and actions.")
      .def_ro("memory", &ChainSchedule::memory)
      .def_ro("recompute", &ChainSchedule::recompute)
      .def_ro("actions", &ChainSchedule::actions)
      .def_ro("memory_bytes", &ChainSchedule::memory_bytes)
      .def_ro("recompute_time", &ChainSchedule::recompute_time)
      .def_ro("unit_bytes", &ChainSchedule::unit_bytes)
      .def_ro("slots", &ChainSchedule::slots)
      .def_ro("predicted_recompute_time", &ChainSchedule::predicted_recompute_time)
      .def_ro("schedule", &ChainSchedule::schedule);
  nb::class_<EagerPlan>(m, "EagerPlan", "An eager plan: its regions and the planner's figures.")
      .def_ro("regions", &EagerPlan::regions)
      .def_ro("peak_bytes", &EagerPlan::peak_bytes)
      .def_ro("recompute_time", &EagerPlan::recompute_time)
      .def_ro("minimum_budget", &EagerPlan::minimum_budget)
      .def_ro("no_checkpoint_bytes", &EagerPlan::no_checkpoint_bytes)
      .def_ro("unit_bytes", &EagerPlan::unit_bytes);
  m.def("solve", &solve, "memory"_a, "runtime"_a, "max_memory"_a, "solver"_a, "scale"_a,
        "time_limit"_a.none(), "max_planner_bytes"_a, "refuse_on_memory_limit"_a = false);
  m.def("pareto", &pareto, "memory"_a, "runtime"_a, "max_memory"_a, "scale"_a,
        "max_planner_bytes"_a, "time_limit"_a.none());
  m.def("solvers", [] {
    std::vector<std::string> names;
    for (auto s : remat::all_solvers()) names.push_back(remat::to_string(s));
    return names;
  });
  m.def("default_max_planner_bytes", &remat::default_max_planner_bytes);
  m.def("plan_profile", &plan_profile, "input_bytes"_a, "activation_bytes"_a, "forward_time"_a,
        "budget"_a, "slots"_a, "max_planner_bytes"_a);
  m.def("simulate_profile", &simulate_profile, "input_bytes"_a, "activation_bytes"_a,
        "forward_time"_a, "strategy"_a, "parameter"_a);
  m.def("eager_plan", &eager_plan, "input_bytes"_a, "layers"_a, "region_overhead"_a,
        "max_region_layers"_a, "budget"_a, "slots"_a, "max_planner_bytes"_a);
  m.def("eager_minimum", &eager_minimum, "input_bytes"_a, "layers"_a, "region_overhead"_a,
        "max_region_layers"_a);
  m.def("eager_evaluate", &eager_evaluate, "input_bytes"_a, "layers"_a, "region_overhead"_a,
        "max_region_layers"_a, "regions"_a);
  nb::class_<OffloadPlan>(m, "OffloadPlan",
                          "A keep/recompute/offload plan and the model's figures for it.")
      .def_ro("layers", &OffloadPlan::layers)
      .def_ro("peak_bytes", &OffloadPlan::peak_bytes)
      .def_ro("host_bytes", &OffloadPlan::host_bytes)
      .def_ro("minimum_budget", &OffloadPlan::minimum_budget)
      .def_ro("unit_bytes", &OffloadPlan::unit_bytes)
      .def_ro("recompute_time", &OffloadPlan::recompute_time)
      .def_ro("stall_time", &OffloadPlan::stall_time)
      .def_ro("copy_time", &OffloadPlan::copy_time);
  m.def("offload_plan", &offload_plan, "input_bytes"_a, "layers"_a, "region_overhead"_a,
        "budget"_a, "bandwidth"_a, "host_budget"_a, "backward_time"_a, "offloadable"_a,
        "input_offloadable"_a, "slots"_a,
        "host_slots"_a);
  m.def("min_cut", &min_cut, "nodes"_a, "tails"_a, "heads"_a, "capacities"_a, "source"_a, "sink"_a);
  m.attr("UNBOUNDED_CAPACITY") = remat::kUnboundedCapacity;
  m.def("optimal_chain_recompute", &remat::chain::optimal_recompute, "layers"_a, "memory"_a);
}
