#include "orchestrator/run/handover_check.h"

namespace strata {

HandoverVerification CompareServersWithCheckpoint(const Checkpoint& checkpoint,
                                                  const std::vector<ServerModelRead>& reads,
                                                  const std::vector<int64_t>& loaded_versions) {
  HandoverVerification v;
  for (size_t p = 0; p < reads.size(); ++p) {
    for (int64_t version : reads[p].header_versions) {
      if (p >= loaded_versions.size() || version != loaded_versions[p]) v.raced_with_a_push = true;
    }
    for (const NamedTensor& t : reads[p].tensors) {
      const CheckpointEntry* e = checkpoint.Find(TensorKind::kParameter, t.name());
      if (e == nullptr) e = checkpoint.Find(TensorKind::kBuffer, t.name());
      ++v.tensors_compared;
      if (e == nullptr || e->tensor.data != t.data) ++v.tensors_differing;
    }
  }
  v.weights_equal = v.tensors_compared > 0 && v.tensors_differing == 0 && !v.raced_with_a_push;
  return v;
}

void FinishHandoverVerification(double workers_max_abs_diff, HandoverVerification& v) {
  v.workers_max_abs_diff = workers_max_abs_diff;
  if (v.raced_with_a_push) {
    v.weights_equal = workers_max_abs_diff == 0.0;
    v.checked_by = "workers";
  } else {
    v.checked_by = "servers";
  }
}

}  // namespace strata
