// Multi-process start-up; see bootstrap.h.
#include "executor/cuda/bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#ifdef TRAINPLAN_HAVE_MPI
#include <mpi.h>
#endif

namespace trainplan::executor::cuda {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

Result<int> env_int(const char* name) {
  const char* v = env(name);
  if (v == nullptr) return Status::Error(std::string("environment variable ") + name + " is not set");
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 24)
    return Status::Error(std::string("environment variable ") + name + "=" + v +
                         " is not a non-negative integer");
  return static_cast<int>(x);
}

// rank, size, local-rank variable names of one launcher.
struct Names {
  const char *rank, *size, *local, *launcher;
};
constexpr Names kLaunchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "pmi"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "srun"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_text() { return std::strerror(errno); }

// Sends or receives exactly n bytes; false on error or a closed peer.
bool send_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
bool recv_all(int fd, void* p, std::size_t n, double deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    const int ms = static_cast<int>((deadline - now_s()) * 1000);
    if (ms <= 0 || ::poll(&pf, 1, ms) <= 0) return false;
    const ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status tcp_broadcast(const LaunchInfo& info, void* data, std::size_t bytes, double timeout_s) {
  const char* addr = env("MASTER_ADDR");
  const char* port = env("MASTER_PORT");
  if (addr == nullptr || port == nullptr)
    return Status::Error("without MPI, a multi-process run needs MASTER_ADDR and MASTER_PORT "
                         "(torchrun-style) for the NCCL id rendezvous");
  const std::string where = std::string(addr) + ":" + port;
  const double deadline = now_s() + timeout_s;
  if (info.rank == 0) {
    Fd s;
    s.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (s.fd < 0) return Status::Error("socket(): " + errno_text(), ExitCode::kRuntime);
    const int one = 1;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons(static_cast<std::uint16_t>(std::atoi(port)));
    if (::bind(s.fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(s.fd, 128) != 0)
      return Status::Error("rank 0 cannot listen on port " + std::string(port) + ": " + errno_text(),
                           ExitCode::kRuntime);
    int served = 0;
    while (served < info.size - 1) {
      pollfd pf{s.fd, POLLIN, 0};
      const int ms = static_cast<int>((deadline - now_s()) * 1000);
      if (ms <= 0 || ::poll(&pf, 1, ms) <= 0)
        return Status::Error("NCCL rendezvous at " + where + ": only " + std::to_string(served) +
                                 " of " + std::to_string(info.size - 1) +
                                 " other ranks connected within " + std::to_string(timeout_s) + " s",
                             ExitCode::kRuntime);
      Fd c;
      c.fd = ::accept(s.fd, nullptr, nullptr);
      if (c.fd < 0) continue;
      const std::uint64_t n = bytes;
      if (!send_all(c.fd, &n, sizeof(n)) || !send_all(c.fd, data, bytes))
        return Status::Error("NCCL rendezvous at " + where + ": send failed: " + errno_text(),
                             ExitCode::kRuntime);
      ++served;
    }
    return Status::Ok();
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(addr, port, &hints, &res) != 0 || res == nullptr)
    return Status::Error("cannot resolve MASTER_ADDR " + std::string(addr));
  std::vector<char> addr_copy(reinterpret_cast<char*>(res->ai_addr),
                              reinterpret_cast<char*>(res->ai_addr) + res->ai_addrlen);
  const socklen_t addr_len = res->ai_addrlen;
  ::freeaddrinfo(res);
  while (true) {
    Fd c;
    c.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (c.fd < 0) return Status::Error("socket(): " + errno_text(), ExitCode::kRuntime);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(addr_copy.data()), addr_len) == 0) {
      std::uint64_t n = 0;
      if (!recv_all(c.fd, &n, sizeof(n), deadline) || n != bytes ||
          !recv_all(c.fd, data, bytes, deadline))
        return Status::Error("NCCL rendezvous at " + where + ": rank " + std::to_string(info.rank) +
                                 " did not receive the id from rank 0",
                             ExitCode::kRuntime);
      return Status::Ok();
    }
    if (now_s() > deadline)
      return Status::Error("NCCL rendezvous: rank " + std::to_string(info.rank) +
                               " could not reach rank 0 at " + where + " within " +
                               std::to_string(timeout_s) + " s: " + errno_text(),
                           ExitCode::kRuntime);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

Result<LaunchInfo> launch_info_from_env() {
  for (const Names& n : kLaunchers) {
    if (env(n.rank) == nullptr) continue;
    LaunchInfo info;
    info.launcher = n.launcher;
    auto r = env_int(n.rank);
    if (!r.ok()) return r.status();
    auto s = env_int(n.size);
    if (!s.ok()) return s.status();
    info.rank = *r;
    info.size = *s;
    if (env(n.local) != nullptr) {
      auto l = env_int(n.local);
      if (!l.ok()) return l.status();
      info.local_rank = *l;
    } else {
      info.local_rank = info.rank;  // one node
    }
    if (info.size < 1 || info.rank >= info.size)
      return Status::Error(std::string(n.rank) + "=" + std::to_string(info.rank) + " is not below " +
                           n.size + "=" + std::to_string(info.size));
    return info;
  }
  return LaunchInfo{};
}

bool sharing_one_gpu() {
  const char* v = env("TRAINPLAN_CUDA_DEVICE");
  return v != nullptr && std::string(v) != "local";
}

Result<int> select_device(const LaunchInfo& info) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return Status::Error(std::string("no CUDA device: ") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0"),
                         ExitCode::kRuntime);
  const char* v = env("TRAINPLAN_CUDA_DEVICE");
  const std::string mode = v != nullptr ? v : "local";
  int dev = info.local_rank;
  if (mode == "shared") {
    dev = info.local_rank % count;
  } else if (mode != "local") {
    char* end = nullptr;
    dev = static_cast<int>(std::strtol(mode.c_str(), &end, 10));
    if (*end != '\0')
      return Status::Error("TRAINPLAN_CUDA_DEVICE=" + mode + ": expected local, shared or a number");
  }
  if (dev < 0 || dev >= count)
    return Status::Error("rank " + std::to_string(info.rank) + " would use CUDA device " +
                         std::to_string(dev) + " but this node has " + std::to_string(count) +
                         " (set TRAINPLAN_CUDA_DEVICE=shared or a device number to share one)");
  return dev;
}

std::string prepare_shared_gpu_env(const LaunchInfo& info, int nccl_version_code) {
  if (!sharing_one_gpu()) return "";
  std::string said;
  auto set = [&](const char* name, const std::string& value) {
    if (env(name) != nullptr) return;
    ::setenv(name, value.c_str(), 1);
    said += std::string(said.empty() ? "" : " ") + name + "=" + value;
  };
  // NCCL_VERSION_CODE for 2.30.0 is 23000 (NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z).
  if (nccl_version_code >= 23000) {
    set("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  } else {
    set("NCCL_HOSTID", "trainplan-rank-" + std::to_string(info.rank));
    set("NCCL_SOCKET_IFNAME", "lo");
    set("NCCL_IB_DISABLE", "1");  // "other hosts" are this one: sockets over loopback
  }
  return said;
}

Status broadcast_bytes(const LaunchInfo& info, void* data, std::size_t bytes, double timeout_s) {
  if (info.size == 1) return Status::Ok();
#ifdef TRAINPLAN_HAVE_MPI
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (mpi_up != 0 && info.launcher != "torchrun") {
    const int rc = MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
      return Status::Error("MPI_Bcast of the NCCL id failed (code " + std::to_string(rc) + ")",
                           ExitCode::kRuntime);
    return Status::Ok();
  }
#endif
  return tcp_broadcast(info, data, bytes, timeout_s);
}

}  // namespace trainplan::executor::cuda
