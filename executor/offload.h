// The offload tiers of one rank (Plan::offload, Plan::offload_device), backend-neutral parts: the
// bytes a step moves between the tiers, and the file a rank keeps its NVMe-tier states in.
//
// What the tiers hold follows the cost model (core/cost/memory.cc, place_offloaded_states and
// offload_traffic_on_stage):
//  - offload optimizer (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840, sec. 4.1): the AdamW
//    moments of the range the rank updates live off the device; each step its reduced gradient
//    shard goes to the host, the host runs AdamW on its copy of the parameters, and the updated
//    parameters come back;
//  - offload optimizer+params (ZeRO-3 only; ZeRO-Infinity, Rajbhandari et al. 2021,
//    arXiv:2104.07857, sec. 5.1): the parameter and gradient shards live off the device too;
//    every ZeRO-3 gather streams the shard in first, every micro-batch's reduced gradient shard
//    goes to the host and is accumulated there, and nothing comes back after the step;
//  - offload_device nvme (ZeRO-Infinity's infinity offload engine, sec. 6.2): the optimizer
//    states, the moments and the fp32 parameters the host updates (with optimizer+params the
//    parameter shard, which each gather also reads), are in a file: read for the step (and the
//    shard for each gather), written after it; with the prefetch, each read ahead on a thread
//    (BackgroundReader) while the block before is updated or computes.
// This is the executor's working store, not an input or output: a file created exclusively
// under the directory the user names (execute --offload-dir) and removed when the run ends.
//
// Tested by tests/executor/offload_test.cc (the file) and tests/executor/offload_check.cc (a
// training run against the same plan without offload, under MPI).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"

namespace trainplan::executor {

// Bytes one rank moved between the tiers during a step, in the cost model's OffloadTraffic terms.
struct OffloadBytes {
  double device_to_host = 0;  // gradient shards to the host (ZeRO-Offload's PCIe traffic)
  double host_to_device = 0;  // updated parameters back, or parameter shards streamed in
  double nvme_read = 0;
  double nvme_write = 0;
  // Of nvme_read, what the prefetch read ahead on its thread (OffloadOptions::prefetch): the
  // next block's moments during the optimizer step, and from the second step on the next
  // gather's parameter shard (optimizer+params). Not a cost-model term: how much of the reading
  // was overlapped.
  double nvme_prefetched = 0;
};

// Where the offloaded states of a trainer go (TrainOptions::offload).
struct OffloadOptions {
  std::string dir;      // offload_device nvme: the directory of the per-rank files
  bool prefetch = true;  // nvme: read the next block's states on a thread while one is updated,
                         // and the next gather's parameter shard while a block computes
};

// The name of rank `rank`'s offload file under `dir` ("DIR/trainplan-offload.rank3.bin").
std::string offload_file_path(const std::string& dir, std::int64_t rank);

// Checks that `dir` names an existing, writable directory (an error naming `flag` and the
// directory otherwise), before anything is allocated.
Status check_offload_dir(const std::string& dir, const std::string& flag);

// One rank's NVMe-tier store: a file of `bytes` bytes, created exclusively (an existing file is
// never overwritten: an error naming it), its space reserved at once (posix_fallocate: a full
// device is an error now, not in the middle of a step), and removed by the destructor. Reads
// and writes are positional (pread / pwrite) and thread-safe with each other on disjoint ranges.
class OffloadFile {
 public:
  static Result<std::unique_ptr<OffloadFile>> create(const std::string& dir, std::int64_t rank,
                                                     std::int64_t bytes);
  ~OffloadFile();
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  // Reads / writes `bytes` bytes at `offset`, all of them (short transfers are retried); an error
  // names the file, the offset and the system's reason.
  Status read(std::int64_t offset, void* into, std::int64_t bytes) const;
  Status write(std::int64_t offset, const void* from, std::int64_t bytes) const;
  const std::string& path() const { return path_; }
  std::int64_t size_bytes() const { return size_; }

 private:
  OffloadFile(std::string path, int fd, std::int64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;
};

// One read at a time on a thread of its own, started once: what the NVMe tier's prefetch runs
// (the next block's states read while one is updated). A read allocates nothing, so that a step
// with offload allocates nothing either (issue 28's allocation-free step).
class BackgroundReader {
 public:
  BackgroundReader();
  ~BackgroundReader();  // waits for a read in flight
  BackgroundReader(const BackgroundReader&) = delete;
  BackgroundReader& operator=(const BackgroundReader&) = delete;
  // Starts reading `bytes` at `offset` of `file` into `into`; the one before must have been
  // waited for.
  void start(const OffloadFile& file, std::int64_t offset, void* into, std::int64_t bytes);
  bool busy() const { return pending_; }  // started and not waited for (the caller's thread)
  // Waits for the read started last and returns its status.
  Status wait();

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const OffloadFile* file_ = nullptr;
  std::int64_t offset_ = 0, bytes_ = 0;
  void* into_ = nullptr;
  bool has_job_ = false, finished_ = false, stop_ = false;
  bool pending_ = false;
  Status status_;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace trainplan::executor
