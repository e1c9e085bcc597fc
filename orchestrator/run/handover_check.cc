#include "orchestrator/run/handover_check.h"

#include <map>
#include <utility>

#include <absl/strings/str_cat.h>

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
  // How often each parameter and buffer of the checkpoint came back.
  std::map<std::pair<TensorKind, std::string>, int> returned;
  for (const CheckpointEntry& e : checkpoint.entries) {
    if (e.kind != TensorKind::kMomentum) returned[{e.kind, e.tensor.name()}] = 0;
  }
  for (size_t p = 0; p < reads.size(); ++p) {
    for (int64_t version : reads[p].header_versions) {
      if (p >= loaded_versions.size() || version != loaded_versions[p]) v.raced_with_a_push = true;
    }
    for (const NamedTensor& t : reads[p].tensors) {
      const CheckpointEntry* e = checkpoint.Find(TensorKind::kParameter, t.name());
      if (e == nullptr) e = checkpoint.Find(TensorKind::kBuffer, t.name());
      ++v.tensors_compared;
      if (e == nullptr) {
        differs(p, t.name() + " (not in the handover model)");
        continue;
      }
      const int times = ++returned[{e->kind, t.name()}];
      if (times > 1) {
        differs(p, t.name() + " (sent by more than one server)");
      } else if (e->tensor.data != t.data || e->tensor.spec.shape != t.spec.shape) {
        differs(p, t.name());
      }
    }
  }
  for (const auto& [key, times] : returned) {
    if (times == 0) {
      ++v.tensors_missing;
      if (v.differing.size() < HandoverVerification::kMaxDiffering) {
        v.differing.push_back(absl::StrCat(key.second, ": on no server"));
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
