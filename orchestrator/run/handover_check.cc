#include "orchestrator/run/handover_check.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>

#include "services/common/wire/partition_plan.h"

namespace strata {

HandoverVerification CompareServersWithCheckpoint(const Checkpoint& checkpoint,
                                                  const std::vector<ServerModelRead>& reads,
                                                  const std::vector<int64_t>& loaded_versions) {
  HandoverVerification v;
  auto differs = [&v](size_t server, const std::string& tensor) {
    ++v.tensors_differing;
    if (v.differing.size() < HandoverVerification::kMaxDiffering) {
      v.differing.push_back(absl::StrCat("ps-", server, ": ", tensor));
    }
  };
  // How often each row of each parameter and buffer of the checkpoint came back: a tensor split
  // over the servers (services/common/wire/partition_plan.h) comes back in pieces of rows.
  std::map<std::pair<TensorKind, std::string>, std::vector<int>> returned;
  for (const CheckpointEntry& e : checkpoint.entries) {
    if (e.kind != TensorKind::kMomentum) {
      returned[{e.kind, e.tensor.name()}].assign(static_cast<size_t>(RowsOf(e.tensor.spec)), 0);
    }
  }
  for (size_t p = 0; p < reads.size(); ++p) {
    for (int64_t version : reads[p].header_versions) {
      if (p >= loaded_versions.size() || version != loaded_versions[p]) v.raced_with_a_push = true;
    }
    for (const NamedTensor& t : reads[p].tensors) {
      const std::optional<PieceOfName> piece = ParsePieceName(t.name());
      const std::string& name = piece ? piece->tensor : t.name();
      const CheckpointEntry* e = checkpoint.Find(TensorKind::kParameter, name);
      if (e == nullptr) e = checkpoint.Find(TensorKind::kBuffer, name);
      ++v.tensors_compared;
      if (e == nullptr) {
        differs(p, t.name() + " (not in the handover model)");
        continue;
      }
      const TensorSpec& spec = e->tensor.spec;
      const int64_t rows = RowsOf(spec);
      const int64_t first = piece ? piece->first_row : 0, end = piece ? piece->end_row : rows;
      if (end > rows || (piece && spec.shape.empty())) {
        differs(p, t.name() + " (rows outside the tensor)");
        continue;
      }
      std::vector<int64_t> shape = spec.shape;
      if (!shape.empty()) shape[0] = end - first;
      const size_t row_bytes =
          e->tensor.data.size() / static_cast<size_t>(std::max<int64_t>(rows, 1));
      std::vector<int>& times = returned[{e->kind, name}];
      bool twice = false;
      for (int64_t r = first; r < end; ++r) twice = ++times[static_cast<size_t>(r)] > 1 || twice;
      if (twice) {
        differs(p, t.name() + " (sent by more than one server)");
      } else if (t.spec.shape != shape ||
                 t.data.size() != row_bytes * static_cast<size_t>(end - first) ||
                 std::memcmp(t.data.data(), e->tensor.data.data() + row_bytes * first,
                             t.data.size()) != 0) {
        differs(p, t.name());
      }
    }
  }
  for (const auto& [key, times] : returned) {
    if (std::find(times.begin(), times.end(), 0) != times.end()) {
      ++v.tensors_missing;
      if (v.differing.size() < HandoverVerification::kMaxDiffering) {
        v.differing.push_back(absl::StrCat(
            key.second, ": on no server",
            std::count(times.begin(), times.end(), 0) < static_cast<int64_t>(times.size())
                ? " (some rows)"
                : ""));
      }
    }
  }
  v.weights_equal = v.tensors_compared > 0 && v.tensors_differing == 0 && v.tensors_missing == 0 &&
                    !v.raced_with_a_push;
  v.checked_by = "servers";
  return v;
}

bool ServersDiffer(const HandoverVerification& v) {
  // A copy a push has already moved says nothing: the workers decide then.
  return !v.error && !v.raced_with_a_push &&
         (v.tensors_differing > 0 || v.tensors_missing > 0 || v.tensors_compared == 0);
}

void FinishHandoverVerification(double workers_max_abs_diff, HandoverVerification& v) {
  v.workers_max_abs_diff = workers_max_abs_diff;
  if (v.error) return;
  if (v.raced_with_a_push) {
    v.weights_equal = workers_max_abs_diff == 0.0;
    v.checked_by = "workers";
  } else {
    v.weights_equal = v.weights_equal && workers_max_abs_diff == 0.0;
    v.checked_by = "servers and workers";
  }
}

}  // namespace strata
