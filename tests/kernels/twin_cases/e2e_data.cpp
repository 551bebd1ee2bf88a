// Inputs and reference checks for the end-to-end runs of run_all.sh (runner + kernel .so).
//   e2e_data srd-gen <dir> <float|half>    writes x.bin, y.bin; prints "<block_dim> <tiling_hex>"
//   e2e_data srd-check <dir> <float|half>  compares y.bin with a scalar reference
//   e2e_data lag-gen / lag-check <dir> <float|half>   the same for linear_add_gelu
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "lib/matmul_intf.h"

namespace {

struct SrdTiling {
    int32_t totalLength, blockLength, tileLength;
    uint32_t seedMix;
    float scale, dropP, keepScale;
};
struct LagTiling {
    TCubeTiling cube;
    int32_t epiRows;
};

constexpr int SRD_N = 1003, SRD_BLOCKS = 3;
constexpr int LAG_M = 70, LAG_N = 50, LAG_K = 40;

SrdTiling MakeSrd()
{
    int blockLength = ((SRD_N + SRD_BLOCKS - 1) / SRD_BLOCKS + 15) / 16 * 16;
    return {SRD_N, blockLength, 128, 1234u * 0x9E3779B9u, 1.5f, 0.25f, 1.0f / 0.75f};
}

LagTiling MakeLag()
{
    LagTiling t{};
    TCubeTiling& c = t.cube;
    c.M = LAG_M; c.N = LAG_N; c.Ka = LAG_K; c.Kb = LAG_K;
    c.singleCoreM = 32; c.singleCoreN = 48; c.singleCoreK = LAG_K;
    c.usedCoreNum = 3 * 2;
    c.baseM = 16; c.baseN = 32; c.baseK = 16;
    c.depthA1 = 2; c.depthB1 = 2; c.stepM = 1; c.stepN = 1; c.stepKa = 2; c.stepKb = 1;
    c.iterateOrder = 0; c.dbL0A = 2; c.dbL0B = 2; c.dbL0C = 1;
    t.epiRows = 5;
    return t;
}

template <typename T>
void Write(const std::string& path, const std::vector<T>& v)
{
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> Read(const std::string& path, size_t n)
{
    std::vector<T> v(n);
    std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(v.data()), n * sizeof(T));
    return v;
}

template <typename S>
void PrintHex(const S& s)
{
    const auto* p = reinterpret_cast<const uint8_t*>(&s);
    for (size_t i = 0; i < sizeof(S); ++i) std::printf("%02x", p[i]);
}

float Val(int i) { return float((i * 37) % 23 - 11) * 0.125f; }

template <typename T>
int Srd(const std::string& mode, const std::string& dir)
{
    SrdTiling t = MakeSrd();
    if (mode == "gen") {
        std::vector<T> x(SRD_N);
        for (int i = 0; i < SRD_N; ++i) x[i] = T(Val(i));
        Write(dir + "/x.bin", x);
        Write(dir + "/y.bin", std::vector<T>(SRD_N, T(-99)));
        std::printf("%d ", SRD_BLOCKS);
        PrintHex(t);
        std::printf("\n");
        return 0;
    }
    std::vector<T> x = Read<T>(dir + "/x.bin", SRD_N), y = Read<T>(dir + "/y.bin", SRD_N);
    int dropped = 0;
    for (int i = 0; i < SRD_N; ++i) {
        uint32_t h = uint32_t(i) + t.seedMix;
        h *= 0x85EBCA6Bu;
        for (int round = 0; round < 2; ++round) {
            h += h >> 16;
            h *= h;
        }
        bool keep = static_cast<float>(static_cast<int32_t>(h)) > t.dropP * 4294967296.0f - 2147483648.0f;
        dropped += !keep;
        T v = T(float(x[i]) * float(T(t.scale * t.keepScale)));
        v = keep ? T(std::max(float(v), 0.0f)) : T(0.0f);
        if (y[i] != v) {
            std::fprintf(stderr, "srd y[%d] = %g, want %g\n", i, double(y[i]), double(v));
            return 1;
        }
    }
    if (dropped < SRD_N / 8 || dropped > SRD_N * 3 / 8) {
        std::fprintf(stderr, "srd dropped %d of %d with p = 0.25\n", dropped, SRD_N);
        return 1;
    }
    return 0;
}

template <typename T>
int Lag(const std::string& mode, const std::string& dir)
{
    if (mode == "gen") {
        std::vector<T> x(LAG_M * LAG_K), w(LAG_K * LAG_N), b(LAG_N);
        for (size_t i = 0; i < x.size(); ++i) x[i] = T(Val(int(i)) * 0.5f);
        for (size_t i = 0; i < w.size(); ++i) w[i] = T(Val(int(i * 7 + 3)) * 0.25f);
        for (size_t i = 0; i < b.size(); ++i) b[i] = T(Val(int(i * 5 + 1)));
        Write(dir + "/x.bin", x);
        Write(dir + "/w.bin", w);
        Write(dir + "/b.bin", b);
        Write(dir + "/out.bin", std::vector<T>(LAG_M * LAG_N, T(-99)));
        std::printf("%d ", MakeLag().cube.usedCoreNum);
        PrintHex(MakeLag());
        std::printf("\n");
        return 0;
    }
    std::vector<T> x = Read<T>(dir + "/x.bin", LAG_M * LAG_K), w = Read<T>(dir + "/w.bin", LAG_K * LAG_N);
    std::vector<T> b = Read<T>(dir + "/b.bin", LAG_N), out = Read<T>(dir + "/out.bin", LAG_M * LAG_N);
    const double rtol = sizeof(T) == 2 ? 2e-3 : 1e-5;
    for (int i = 0; i < LAG_M; ++i) {
        for (int j = 0; j < LAG_N; ++j) {
            double acc = double(b[j]);
            for (int k = 0; k < LAG_K; ++k) acc += double(x[i * LAG_K + k]) * double(w[k * LAG_N + j]);
            double want = acc / (1.0 + std::exp(-1.5957691 * (acc + 0.044715 * acc * acc * acc)));
            double got = double(out[i * LAG_N + j]);
            if (std::fabs(got - want) > rtol * (std::fabs(want) + 1e-2)) {
                std::fprintf(stderr, "lag out[%d][%d] = %g, want %g\n", i, j, got, want);
                return 1;
            }
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 4) {
        std::fprintf(stderr, "usage: e2e_data srd-gen|srd-check|lag-gen|lag-check <dir> <float|half>\n");
        return 2;
    }
    std::string what = argv[1], dir = argv[2], dtype = argv[3];
    std::string op = what.substr(0, 3), mode = what.substr(4);
    bool isHalf = dtype == "half";
    if (op == "srd") return isHalf ? Srd<half>(mode, dir) : Srd<float>(mode, dir);
    return isHalf ? Lag<half>(mode, dir) : Lag<float>(mode, dir);
}
