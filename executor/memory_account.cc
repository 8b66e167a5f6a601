// See memory_account.h.
#include "executor/memory_account.h"

#include <algorithm>
#include <array>

namespace trainplan::executor {

const char* memory_use_name(MemoryUse use) {
  static constexpr std::array<const char*, kNumMemoryUses> kNames = {
      "weights",          "gradients",           "optimizer",
      "kept_for_backward", "kept_for_weight_pass", "weight_pass_copies",
      "scratch",          "comm_buffers",        "pooled",
      "offload_host",     "offload_nvme"};
  return kNames[static_cast<std::size_t>(use)];
}

void MemoryAccount::add(std::string_view name, MemoryUse use, double bytes) {
  if (bytes <= 0) return;
  for (MemoryItem& item : items_) {
    if (item.use != use || item.name != name) continue;
    item.bytes += bytes;
    ++item.buffers;
    return;
  }
  items_.push_back({std::string(name), use, bytes, 1});
}

double MemoryAccount::bytes_of(MemoryUse use) const {
  double sum = 0;
  for (const MemoryItem& item : items_)
    if (item.use == use) sum += item.bytes;
  return sum;
}

double MemoryAccount::all_bytes() const {
  double sum = 0;
  for (const MemoryItem& item : items_) sum += item.bytes;
  return sum;
}

double MemoryAccount::off_device_bytes() const {
  return bytes_of(MemoryUse::kOffloadHost) + bytes_of(MemoryUse::kOffloadNvme);
}

double MemoryAccount::total_bytes() const { return all_bytes() - off_device_bytes(); }

double MemoryAccount::in_use_bytes() const {
  return total_bytes() - bytes_of(MemoryUse::kPooled);
}

Json memory_account_to_json(const MemoryAccount& account) {
  std::vector<MemoryItem> items = account.items();
  std::stable_sort(items.begin(), items.end(),
                   [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });
  Json by_use = Json::object();
  for (int u = 0; u < kNumMemoryUses; ++u) {
    const auto use = static_cast<MemoryUse>(u);
    by_use[memory_use_name(use)] = account.bytes_of(use);
  }
  Json list = Json::array();
  for (const MemoryItem& item : items)
    list.push_back({{"name", item.name},
                    {"use", memory_use_name(item.use)},
                    {"bytes", item.bytes},
                    {"buffers", item.buffers}});
  return Json{{"in_use_bytes", account.in_use_bytes()},
              {"pooled_bytes", account.bytes_of(MemoryUse::kPooled)},
              {"off_device_bytes",
               {{"host", account.bytes_of(MemoryUse::kOffloadHost)},
                {"nvme", account.bytes_of(MemoryUse::kOffloadNvme)}}},
              {"by_use", by_use},
              {"items", list}};
}

}  // namespace trainplan::executor
