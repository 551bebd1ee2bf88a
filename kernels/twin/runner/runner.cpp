// tilewise twin runner: a long-lived process that loads kernel variants (.so, see twin_abi.h),
// launches them on a pool of host threads and times the launches.
//
// Protocol: one request per line on stdin, exactly one JSON line per request on stdout.
//   ping
//     -> {"ok":true,"threads":N,"pid":P,"abi":1}
//   run <so> <block_dim> <warmup> <repeats> <max_seconds> <ub> <l1> <l0a> <l0b> <l0c> <bt> <checked>
//       <tiling_hex> <n_gm> <path_1> <bytes_1> ... <path_n> <bytes_n>
//     GM buffers are files mapped MAP_SHARED read/write (path "-": anonymous zeroed memory).
//     -> {"ok":true,"samples_us":[...]}
//      | {"ok":false,"kind":"kernel","error":"..."}   (the kernel or the twin reported an error)
//      | {"ok":false,"kind":"request","error":"..."}  (bad request, file or .so)
//   quit (or EOF) -> exit 0
// Build: clang++-19 -std=c++17 -O2 -pthread runner.cpp -o runner -ldl
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../twin_abi.h"
#include "thread_pool.h"

namespace {

using twin_host::ThreadPool;

struct RequestError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Variant {
    tw_tiling_bytes_fn tilingBytes;
    tw_gm_args_fn gmArgs;
    tw_run_fn run;
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
};

std::string JsonString(const std::string& s)
{
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += char(c);
                }
        }
    }
    return out + "\"";
}

// Variants are cached by path; a path whose file changed since it was loaded is refused, since
// dlopen would return the stale library (build each variant under a new path).
const Variant& LoadVariant(const std::string& path)
{
    static std::map<std::string, Variant> cache;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) throw RequestError("cannot stat " + path + ": " + std::strerror(errno));
    auto it = cache.find(path);
    if (it != cache.end()) {
        const Variant& v = it->second;
        if (v.dev != st.st_dev || v.ino != st.st_ino || v.mtime.tv_sec != st.st_mtim.tv_sec ||
            v.mtime.tv_nsec != st.st_mtim.tv_nsec) {
            throw RequestError(path + " changed since it was loaded; build variants under new paths");
        }
        return v;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) throw RequestError(std::string("dlopen failed: ") + dlerror());
    auto abi = reinterpret_cast<tw_abi_version_fn>(dlsym(handle, "tw_abi_version"));
    Variant v{};
    v.tilingBytes = reinterpret_cast<tw_tiling_bytes_fn>(dlsym(handle, "tw_tiling_bytes"));
    v.gmArgs = reinterpret_cast<tw_gm_args_fn>(dlsym(handle, "tw_gm_args"));
    v.run = reinterpret_cast<tw_run_fn>(dlsym(handle, "tw_run"));
    if (abi == nullptr || v.tilingBytes == nullptr || v.gmArgs == nullptr || v.run == nullptr) {
        dlclose(handle);
        throw RequestError(path + " does not export the tw_* functions of twin_abi.h");
    }
    if (abi() != TW_ABI_VERSION) {
        int got = abi();
        dlclose(handle);
        throw RequestError(path + " has ABI version " + std::to_string(got) + ", the runner has " +
                           std::to_string(TW_ABI_VERSION));
    }
    v.dev = st.st_dev;
    v.ino = st.st_ino;
    v.mtime = st.st_mtim;
    return cache.emplace(path, v).first->second;
}

// GM buffers of one request. The kernel sees each GM argument in anonymous memory on 2 MiB
// transparent huge pages where the host allows them (madvise mode or always): a device's GM is
// allocated on huge pages too (aclrtMalloc's ACL_MEM_MALLOC_HUGE_FIRST), and its copy engines
// do not take a TLB miss per 4 KiB page on the strided reads of tiles (a row of a B tile lies
// a whole matrix row, often several pages, from the next). The files the caller shares are
// copied in when mapped and copied back when the request ends, outside the timed launches.
// The copy is populated before any launch, so no launch (timed or not) pays page faults for GM.
class Mappings {
public:
    ~Mappings()
    {
        for (auto& m : maps_) {
            if (m.file != nullptr) {
                std::memcpy(m.file, m.data, m.bytes);
                munmap(m.file, m.bytes);
            }
            munmap(m.data, m.length);
        }
    }
    uint8_t* Map(const std::string& path, uint64_t bytes)
    {
        Mapping m;
        m.bytes = bytes;
        if (path != "-" && bytes > 0) {
            int fd = open(path.c_str(), O_RDWR);
            if (fd < 0) throw RequestError("cannot open " + path + ": " + std::strerror(errno));
            struct stat st;
            if (fstat(fd, &st) != 0 || uint64_t(st.st_size) < bytes) {
                close(fd);
                throw RequestError(path + " is smaller than " + std::to_string(bytes) + " bytes");
            }
            void* f = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (f == MAP_FAILED) throw RequestError("mmap of " + path + " failed: " + std::strerror(errno));
            m.file = static_cast<uint8_t*>(f);
        }
        // Never a null pointer, even for 0 bytes. Buffers of 2 MiB or more take whole huge pages,
        // huge-page aligned (the slack of the over-sized mapping is unmapped again, so an overrun
        // past the last page still faults); smaller ones whole 4 KiB pages.
        const bool huge = bytes >= kHuge;
        const size_t unit = huge ? kHuge : kPage;
        const size_t length = (std::max<uint64_t>(bytes, 1) + unit - 1) / unit * unit;
        const size_t mapped = length + (huge ? kHuge : 0);
        void* r = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (r == MAP_FAILED) {
            if (m.file != nullptr) munmap(m.file, bytes);
            throw RequestError("mmap of " + std::to_string(bytes) + " bytes of GM failed: " + std::strerror(errno));
        }
        uint8_t* region = static_cast<uint8_t*>(r);
        m.data = region;
        m.length = length;
        if (huge) {
            const size_t head = (kHuge - reinterpret_cast<uintptr_t>(region) % kHuge) % kHuge;
            m.data = region + head;
            if (head > 0) munmap(region, head);
            munmap(m.data + length, mapped - head - length);
            madvise(m.data, length, MADV_HUGEPAGE);  // fails harmlessly where THP is off
        }
        if (m.file != nullptr) std::memcpy(m.data, m.file, bytes);
        for (size_t b = m.file != nullptr ? bytes : 0; b < length; b += kPage) m.data[b] = 0;  // populate
        maps_.push_back(m);
        return m.data;
    }

private:
    static constexpr size_t kHuge = size_t(2) << 20, kPage = 4096;
    struct Mapping {
        uint8_t* data = nullptr;  // what the kernel sees: anonymous, `length` bytes mapped
        size_t length = 0;
        uint64_t bytes = 0;
        uint8_t* file = nullptr;  // the caller's file (`bytes` mapped), or null for "-"
    };
    std::vector<Mapping> maps_;
};

template <typename T>
T Next(std::istringstream& in, const char* what)
{
    T value;
    if (!(in >> value)) throw RequestError(std::string("run: missing or bad ") + what);
    return value;
}

std::vector<uint8_t> FromHex(const std::string& hex)
{
    if (hex == "-") return {};
    if (hex.size() % 2 != 0) throw RequestError("run: tiling_hex has an odd length");
    std::vector<uint8_t> out(hex.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
        unsigned v;
        if (std::sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) throw RequestError("run: tiling_hex is not hex");
        out[i] = uint8_t(v);
    }
    return out;
}

std::string Run(std::istringstream& in, ThreadPool& pool)
{
    const std::string so = Next<std::string>(in, "so_path");
    const uint32_t blockDim = Next<uint32_t>(in, "block_dim");
    const uint32_t warmup = Next<uint32_t>(in, "warmup");
    const uint32_t repeats = Next<uint32_t>(in, "repeats");
    const double maxSeconds = Next<double>(in, "max_seconds");
    TwCoreLimits limits{};
    limits.ub = Next<uint32_t>(in, "ub");
    limits.l1 = Next<uint32_t>(in, "l1");
    limits.l0a = Next<uint32_t>(in, "l0a");
    limits.l0b = Next<uint32_t>(in, "l0b");
    limits.l0c = Next<uint32_t>(in, "l0c");
    limits.bt = Next<uint32_t>(in, "bt");
    limits.checked = Next<uint32_t>(in, "checked");
    const std::vector<uint8_t> tiling = FromHex(Next<std::string>(in, "tiling_hex"));
    const int32_t nGm = Next<int32_t>(in, "n_gm");
    if (nGm < 0 || nGm > 64) throw RequestError("run: n_gm must be in [0, 64]");
    std::vector<std::pair<std::string, uint64_t>> args;
    for (int32_t i = 0; i < nGm; ++i) {
        std::string path = Next<std::string>(in, "gm path");
        args.emplace_back(path, Next<uint64_t>(in, "gm bytes"));
    }
    std::string extra;
    if (in >> extra) throw RequestError("run: unexpected token " + extra);
    if (blockDim == 0) throw RequestError("run: block_dim must be positive");

    const Variant& v = LoadVariant(so);
    if (v.gmArgs() != nGm) {
        throw RequestError("run: the kernel takes " + std::to_string(v.gmArgs()) + " GM args, got " +
                           std::to_string(nGm));
    }
    if (v.tilingBytes() != tiling.size()) {
        throw RequestError("run: the tiling struct is " + std::to_string(v.tilingBytes()) + " bytes, got " +
                           std::to_string(tiling.size()));
    }
    Mappings maps;
    std::vector<uint8_t*> gm;
    for (auto& a : args) gm.push_back(maps.Map(a.first, a.second));

    TwHost host{&ThreadPool::ParallelFor, &pool};
    auto launch = [&] {
        return v.run(gm.data(), nGm, tiling.data(), uint32_t(tiling.size()), blockDim, &limits, &host);
    };
    for (uint32_t i = 0; i < warmup; ++i) {
        if (const char* err = launch()) return "{\"ok\":false,\"kind\":\"kernel\",\"error\":" + JsonString(err) + "}";
    }
    std::ostringstream samples;
    samples.precision(3);
    samples << std::fixed;
    double total = 0;
    for (uint32_t i = 0; i < std::max(repeats, 1u); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        const char* err = launch();
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (err) return "{\"ok\":false,\"kind\":\"kernel\",\"error\":" + JsonString(err) + "}";
        samples << (i ? "," : "") << seconds * 1e6;
        total += seconds;
        if (total > maxSeconds) break;
    }
    return "{\"ok\":true,\"samples_us\":[" + samples.str() + "]}";
}

}  // namespace

int main(int argc, char** argv)
{
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--threads" && i + 1 < argc) {
            threads = unsigned(std::max(1, std::atoi(argv[++i])));
        } else {
            std::fprintf(stderr, "usage: %s [--threads N]\n", argv[0]);
            return 2;
        }
    }
    ThreadPool pool(threads);
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string command;
        if (!(in >> command)) continue;
        std::string reply;
        try {
            if (command == "ping") {
                reply = "{\"ok\":true,\"threads\":" + std::to_string(pool.Threads()) +
                        ",\"pid\":" + std::to_string(getpid()) + ",\"abi\":" + std::to_string(TW_ABI_VERSION) + "}";
            } else if (command == "quit") {
                return 0;
            } else if (command == "run") {
                reply = Run(in, pool);
            } else {
                throw RequestError("unknown command " + command);
            }
        } catch (const std::exception& e) {
            reply = "{\"ok\":false,\"kind\":\"request\",\"error\":" + JsonString(e.what()) + "}";
        }
        std::fwrite(reply.data(), 1, reply.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
    }
    return 0;
}
