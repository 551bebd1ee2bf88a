// A host program calling linear_add_gelu as an application calls an aclnn operator: phase one
// with the tensors (tiling from the tuned table, workspace size, executor), phase two with the
// workspace, then the output checked against a float64 reference computed here.
//
//   linear_add_gelu_host [--shape M=37,N=96,K=80] [--default | --tiling baseM=64,...] [--plan-only]
//                        [--repeats 5] [--seed 0] [--json]
//
// --default skips the table (the op's default heuristic); --tiling gives all 12 tunables (phase
// one checks them as any tiling); --plan-only runs phase one alone and prints what it chose.
//
// Exit code 0 when the output matches, 1 when it does not, 2 on bad arguments or a failed call.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <iterator>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "aclnn_linear_add_gelu.h"
#include "tilewise_linear_add_gelu.h"

namespace {

// The op's tolerance (tilewise's LinearAddGelu.tolerance for float32), numpy.allclose's rule:
// |out - ref| <= kAtol + kRtol * |ref|.
constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-3;

struct Args {
    int64_t m = 37, n = 96, k = 80;
    bool useTable = true;
    int repeats = 5;
    uint64_t seed = 0;
    bool json = false;
    bool planOnly = false;
    bool given = false;
    lag_host::Tunables tiling{};
};

// The tunables by their names in the tiling table.
struct Named {
    const char* name;
    int32_t lag_host::Tunables::*field;
};
constexpr Named kTunables[] = {
    {"baseM", &lag_host::Tunables::baseM},
    {"baseN", &lag_host::Tunables::baseN},
    {"baseK", &lag_host::Tunables::baseK},
    {"stepM", &lag_host::Tunables::stepM},
    {"stepN", &lag_host::Tunables::stepN},
    {"depthA1", &lag_host::Tunables::depthA1},
    {"depthB1", &lag_host::Tunables::depthB1},
    {"dbL0C", &lag_host::Tunables::dbL0C},
    {"iterateOrder", &lag_host::Tunables::iterateOrder},
    {"epiRows", &lag_host::Tunables::epiRows},
    {"singleCoreM", &lag_host::Tunables::singleCoreM},
    {"singleCoreN", &lag_host::Tunables::singleCoreN},
};

[[noreturn]] void Usage(const std::string& problem)
{
    std::fprintf(stderr,
                 "error: %s\nusage: linear_add_gelu_host [--shape M=..,N=..,K=..] [--default | --tiling F=V,..] "
                 "[--plan-only] [--repeats N] [--seed S] [--json]\n",
                 problem.c_str());
    std::exit(2);
}

int64_t ParseInt(const std::string& text, const std::string& what, int64_t low, int64_t high)
{
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < low || v > high) {
        Usage(what + " must be an integer in " + std::to_string(low) + ".." + std::to_string(high) + ", got '" +
              text + "'");
    }
    return v;
}

// "NAME=VALUE,NAME=VALUE,..." as (name, value text) pairs.
std::vector<std::pair<std::string, std::string>> Pairs(const std::string& text, const std::string& option)
{
    std::vector<std::pair<std::string, std::string>> pairs;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, comma - start);
        const size_t eq = item.find('=');
        if (eq == std::string::npos) Usage(option + " takes NAME=VALUE,..., got '" + text + "'");
        pairs.emplace_back(item.substr(0, eq), item.substr(eq + 1));
        start = comma + 1;
    }
    return pairs;
}

Args ParseArgs(int argc, char** argv)
{
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) Usage(arg + " needs a value");
            return argv[++i];
        };
        if (arg == "--shape") {
            const std::string text = value();
            bool seen[3] = {false, false, false};
            for (const auto& [dim, number] : Pairs(text, arg)) {
                const int idx = dim == "M" ? 0 : dim == "N" ? 1 : dim == "K" ? 2 : -1;
                if (idx < 0) Usage("--shape takes M, N and K, got '" + dim + "'");
                (idx == 0 ? a.m : idx == 1 ? a.n : a.k) = ParseInt(number, dim, 1, 1 << 24);  // tilewise's MAX_DIM
                seen[idx] = true;
            }
            if (!(seen[0] && seen[1] && seen[2])) Usage("--shape needs M, N and K");
        } else if (arg == "--tiling") {
            const std::string text = value();
            size_t seen = 0;
            for (const auto& [name, number] : Pairs(text, arg)) {
                const Named* field = nullptr;
                for (const Named& f : kTunables) {
                    if (name == f.name) field = &f;
                }
                if (field == nullptr) Usage("--tiling: '" + name + "' is not a tunable of linear_add_gelu");
                a.tiling.*(field->field) = int32_t(ParseInt(number, name, INT32_MIN, INT32_MAX));
                seen |= size_t(1) << (field - kTunables);
            }
            if (seen != (size_t(1) << std::size(kTunables)) - 1) {
                std::string missing;
                for (size_t i = 0; i < std::size(kTunables); ++i) {
                    if (!(seen >> i & 1)) missing += std::string(missing.empty() ? "" : ", ") + kTunables[i].name;
                }
                Usage("--tiling lacks " + missing);
            }
            a.given = true;
        } else if (arg == "--default") {
            a.useTable = false;
        } else if (arg == "--repeats") {
            a.repeats = int(ParseInt(value(), "--repeats", 0, 10000));
        } else if (arg == "--seed") {
            a.seed = uint64_t(ParseInt(value(), "--seed", 0, std::numeric_limits<int64_t>::max()));
        } else if (arg == "--plan-only") {
            a.planOnly = true;
        } else if (arg == "--json") {
            a.json = true;
        } else {
            Usage("unknown argument '" + arg + "'");
        }
    }
    return a;
}

double GeluTanh(double x)
{
    const double inner = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + std::tanh(inner));
}

struct Tensors {
    std::vector<float> x, w, bias, out;
    aclTensor tx, tw, tbias, tout;
};

void Bind(Tensors& t, const Args& a)
{
    t.tx = aclTensor{t.x.data(), ACL_FLOAT, {a.m, a.k}, 2};
    t.tw = aclTensor{t.w.data(), ACL_FLOAT, {a.k, a.n}, 2};
    t.tbias = aclTensor{t.bias.data(), ACL_FLOAT, {a.n}, 1};
    t.tout = aclTensor{t.out.data(), ACL_FLOAT, {a.m, a.n}, 2};
}

[[noreturn]] void CallFailed(const char* phase, aclnnStatus status)
{
    std::fprintf(stderr, "error: %s returned %d: %s\n", phase, int(status), aclGetRecentErrMsg());
    std::exit(2);
}

// Both phases once; the plan phase one chose, and each phase's time in microseconds.
LinearAddGeluPlan RunOnce(Tensors& t, std::vector<uint8_t>& workspace, double& planUs, double& launchUs,
                          uint64_t& workspaceSize)
{
    using Clock = std::chrono::steady_clock;
    workspaceSize = 0;
    aclOpExecutor* executor = nullptr;
    const auto t0 = Clock::now();
    aclnnStatus status =
        aclnnLinearAddGeluGetWorkspaceSize(&t.tx, &t.tw, &t.tbias, &t.tout, &workspaceSize, &executor);
    const auto t1 = Clock::now();
    if (status != ACLNN_SUCCESS) CallFailed("aclnnLinearAddGeluGetWorkspaceSize", status);
    const LinearAddGeluPlan plan = *LinearAddGeluExecutorPlan(executor);  // the launch frees it
    if (workspace.size() < workspaceSize) workspace.resize(workspaceSize);  // aclrtMalloc's role
    const auto t2 = Clock::now();
    status = aclnnLinearAddGelu(workspaceSize > 0 ? workspace.data() : nullptr, workspaceSize, executor, nullptr);
    const auto t3 = Clock::now();
    if (status != ACLNN_SUCCESS) CallFailed("aclnnLinearAddGelu", status);
    planUs = std::chrono::duration<double, std::micro>(t1 - t0).count();
    launchUs = std::chrono::duration<double, std::micro>(t3 - t2).count();
    return plan;
}

double Median(std::vector<double> v)
{
    if (v.empty()) return std::nan("");
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// The struct's fields as tilewise's OpSpec.tiling_struct names them.
std::vector<std::pair<std::string, int32_t>> StructFields(const lag_host::LinearAddGeluTilingData& d)
{
    std::vector<std::pair<std::string, int32_t>> fields;
#define LAG_FIELD(name) fields.emplace_back("cube." #name, d.cube.name);
    LAG_CUBE_FIELDS(LAG_FIELD)
#undef LAG_FIELD
    fields.emplace_back("epiRows", d.epiRows);
    return fields;
}

std::vector<std::pair<std::string, int32_t>> TunableFields(const lag_host::Tunables& t)
{
    std::vector<std::pair<std::string, int32_t>> fields;
    for (const Named& f : kTunables) fields.emplace_back(f.name, t.*(f.field));
    return fields;
}

std::string JsonString(const std::string& s)
{
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

std::string JsonFields(const std::vector<std::pair<std::string, int32_t>>& fields)
{
    std::string out = "{";
    for (size_t i = 0; i < fields.size(); ++i) {
        out += (i ? ", " : "") + JsonString(fields[i].first) + ": " + std::to_string(fields[i].second);
    }
    return out + "}";
}

std::string Number(double v)
{
    if (!std::isfinite(v)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

struct Outcome {
    bool launched = false;
    uint64_t workspaceSize = 0;
    size_t bad = 0;
    double maxError = 0.0;
    std::vector<double> plans, launches;  // microseconds per timed call of each phase
};

void Report(const Args& a, const LinearAddGeluPlan& plan, const Outcome& o)
{
    const lag_host::TilingDecision& d = plan.decision;
    const auto tunables = TunableFields(d.tunables);
    const auto fields = StructFields(plan.tiling);
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    const bool ok = o.launched && o.bad == 0;
    if (a.json) {
        const std::string table =
            d.tableAnswer == TILEWISE_NOT_FOUND ? "null" : JsonFields(TunableFields(d.tableTunables));
        std::printf(
            "{\"op\": \"linear_add_gelu\", \"op_version\": %s, \"dtype\": \"float32\", \"target\": \"cpu-twin\", "
            "\"shape\": {\"M\": %lld, \"N\": %lld, \"K\": %lld}, \"source\": \"%s\", \"note\": %s, "
            "\"table_answer\": %d, \"table_tiling\": %s, \"tiling\": %s, \"tiling_struct\": %s, "
            "\"block_dim\": %u, \"workspace_bytes\": %llu, \"launched\": %s, \"threads\": %u, "
            "\"plan_us\": %s, \"launch_us\": %s, \"repeats\": %zu, \"max_abs_error\": %s, \"rtol\": %g, "
            "\"atol\": %g, \"mismatches\": %zu, \"ok\": %s}\n",
            JsonString(TILEWISE_LINEAR_ADD_GELU_VERSION).c_str(), (long long)a.m, (long long)a.n, (long long)a.k,
            lag_host::SourceName(d.source), JsonString(d.note).c_str(), d.tableAnswer, table.c_str(),
            JsonFields(tunables).c_str(), JsonFields(fields).c_str(), plan.blockDim,
            (unsigned long long)o.workspaceSize, o.launched ? "true" : "false", threads,
            Number(Median(o.plans)).c_str(), Number(Median(o.launches)).c_str(), o.plans.size(),
            o.launched ? Number(o.maxError).c_str() : "null", kRtol, kAtol, o.bad,
            o.launched ? (ok ? "true" : "false") : "null");
        return;
    }
    std::printf("linear_add_gelu M=%lld N=%lld K=%lld float32 on the CPU twin (%u host threads)\n", (long long)a.m,
                (long long)a.n, (long long)a.k, threads);
    std::printf("tiling: %s", lag_host::SourceName(d.source));
    if (!d.note.empty()) std::printf(" (%s)", d.note.c_str());
    std::printf("\n ");
    for (const auto& f : tunables) std::printf(" %s=%d", f.first.c_str(), f.second);
    std::printf("\nLinearAddGeluTiling, %zu bytes, non-zero fields:\n ", sizeof(plan.tiling));
    int column = 1;
    for (const auto& f : fields) {
        if (f.second == 0) continue;
        const int width = std::snprintf(nullptr, 0, " %s=%d", f.first.c_str(), f.second);
        if (column + width > 100) std::printf("\n "), column = 1;
        column += std::printf(" %s=%d", f.first.c_str(), f.second);
    }
    std::printf("\nblockDim %u, workspace %llu B\n", plan.blockDim, (unsigned long long)o.workspaceSize);
    if (!o.launched) return;
    if (!o.plans.empty()) {
        std::printf("time: GetWorkspaceSize %.1f us, launch %.1f us (medians of %zu calls)\n", Median(o.plans),
                    Median(o.launches), o.plans.size());
    }
    std::printf("check: max |out - ref| = %.3g against float64 matmul + bias + GELU (tanh form); "
                "|out - ref| <= %g + %g*|ref|: %s\n",
                o.maxError, kAtol, kRtol, ok ? "ok" : "MISMATCH");
    if (!ok) std::printf("  %zu of %lld elements outside the tolerance\n", o.bad, (long long)(a.m * a.n));
}

int Main(const Args& a)
{
    LinearAddGeluSetOptions({a.useTable, /*checked=*/true, a.given, a.tiling});

    Tensors t;
    // Phase one alone: the tiling a shape gets. It reads the tensors' shapes, not their data.
    if (a.planOnly) {
        t.x = t.w = t.bias = t.out = std::vector<float>(1);
        Bind(t, a);
        uint64_t workspaceSize = 0;
        aclOpExecutor* executor = nullptr;
        const aclnnStatus status =
            aclnnLinearAddGeluGetWorkspaceSize(&t.tx, &t.tw, &t.tbias, &t.tout, &workspaceSize, &executor);
        if (status != ACLNN_SUCCESS) CallFailed("aclnnLinearAddGeluGetWorkspaceSize", status);
        const LinearAddGeluPlan plan = *LinearAddGeluExecutorPlan(executor);
        aclDestroyAclOpExecutor(executor);
        Outcome none;
        none.workspaceSize = workspaceSize;
        Report(a, plan, none);
        return 0;
    }

    // Inputs as tilewise's LinearAddGelu.make_inputs scales them: outputs of order one.
    std::mt19937_64 rng(a.seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    t.x.resize(size_t(a.m * a.k));
    t.w.resize(size_t(a.k * a.n));
    t.bias.resize(size_t(a.n));
    t.out.assign(size_t(a.m * a.n), std::numeric_limits<float>::quiet_NaN());  // unwritten stays NaN
    const float wScale = float(std::sqrt(3.0 / double(a.k)));
    for (float& v : t.x) v = unit(rng);
    for (float& v : t.w) v = unit(rng) * wScale;
    for (float& v : t.bias) v = 0.5f * unit(rng);
    Bind(t, a);

    // The checked run: the twin's checked mode, then the output against the reference.
    std::vector<uint8_t> workspace;
    Outcome outcome;
    double planUs = 0.0, launchUs = 0.0;
    const LinearAddGeluPlan plan = RunOnce(t, workspace, planUs, launchUs, outcome.workspaceSize);
    outcome.launched = true;
    std::vector<double> acc(size_t(a.n));
    for (int64_t i = 0; i < a.m; ++i) {
        for (int64_t j = 0; j < a.n; ++j) acc[size_t(j)] = t.bias[size_t(j)];
        for (int64_t p = 0; p < a.k; ++p) {  // row by row through w: no strided reads
            const double xv = t.x[size_t(i * a.k + p)];
            const float* wRow = &t.w[size_t(p * a.n)];
            for (int64_t j = 0; j < a.n; ++j) acc[size_t(j)] += xv * double(wRow[j]);
        }
        for (int64_t j = 0; j < a.n; ++j) {
            const double ref = GeluTanh(acc[size_t(j)]);
            const double err = std::fabs(double(t.out[size_t(i * a.n + j)]) - ref);
            if (!(err <= kAtol + kRtol * std::fabs(ref))) ++outcome.bad;  // NaN counts as wrong
            if (!(err <= outcome.maxError)) outcome.maxError = err;       // and NaN stays
        }
    }

    // Timed runs, as an application calls the op: both phases each time, unchecked launches.
    LinearAddGeluSetOptions({a.useTable, /*checked=*/false, a.given, a.tiling});
    for (int r = 0; r < a.repeats; ++r) {
        double p = 0.0, l = 0.0;
        uint64_t size = 0;
        RunOnce(t, workspace, p, l, size);
        outcome.plans.push_back(p);
        outcome.launches.push_back(l);
    }
    Report(a, plan, outcome);
    return outcome.bad == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv)
{
    const Args a = ParseArgs(argc, argv);
    try {
        return Main(a);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: cannot allocate the tensors of M=%lld N=%lld K=%lld\n", (long long)a.m,
                     (long long)a.n, (long long)a.k);
        return 2;
    } catch (const std::length_error&) {
        std::fprintf(stderr, "error: the tensors of M=%lld N=%lld K=%lld are too large\n", (long long)a.m,
                     (long long)a.n, (long long)a.k);
        return 2;
    }
}
