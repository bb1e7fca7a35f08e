#include "xinfer/scheduler/waiting_queue.h"

#include "xinfer/core/check.h"

namespace xinfer::sched {

Sequence* WaitingQueue::pick(int window, int max_bypass) const {
  XI_CHECK(!set_.empty());
  Sequence* head = *set_.begin();
  if (window <= 1) return head;
  Sequence* best = nullptr;
  int n = 0;
  for (auto it = set_.begin(); it != set_.end() && n < window; ++it, ++n) {
    Sequence* s = *it;
    if (s->request.priority != head->request.priority) break;
    if (s->bypass_count >= max_bypass) return s;  // aged: first aged entry in order goes next
    if (best == nullptr || s->num_remaining() < best->num_remaining()) best = s;
  }
  return best;
}

void WaitingQueue::admitted(Sequence* s, int window) {
  int n = 0;
  for (auto it = set_.begin(); it != set_.end() && n < window && *it != s; ++it, ++n) {
    if ((*it)->request.priority == s->request.priority) ++(*it)->bypass_count;
  }
  size_t erased = set_.erase(s);
  XI_CHECK_EQ(erased, 1u) << "admitted sequence " << s->request.id << " was not waiting";
}

}  // namespace xinfer::sched
