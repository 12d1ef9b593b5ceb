// llama.cpp on its own, timed the way its llama-bench times it, for comparison with
// EmbeddedModel (benches/compare-llama-cpp.sh builds and runs it).
//
// The llama.cpp that llama-cpp-sys-2 vendors ships without the sources of its tools, so
// llama-bench itself cannot be built from it. This program links the very static libraries
// that cargo built for gepa-lab and does what llama-bench's pp and tg tests do: a prompt of
// random tokens decoded in one batch, then tokens decoded one at a time, each test on an empty
// KV cache after one warm-up run, without sampling.
//
//   llama_cpp_bench MODEL.gguf THREADS N_PROMPT N_GEN REPS
#include "llama.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

static void quiet(enum ggml_log_level, const char *, void *) {}

static double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

static void report(const char * test, int tokens, const std::vector<double> & secs, double load) {
    std::vector<double> rates;
    for (double s : secs) {
        rates.push_back(tokens / s);
    }
    double mean = 0;
    for (double r : rates) {
        mean += r;
    }
    mean /= rates.size();
    double var = 0;
    for (double r : rates) {
        var += (r - mean) * (r - mean);
    }
    double sd = rates.size() > 1 ? std::sqrt(var / (rates.size() - 1)) : 0;
    std::printf("| llama.cpp (C API) | %.2f s | %s%d | %.2f ± %.2f |\n", load, test, tokens, mean, sd);
}

int main(int argc, char ** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s MODEL.gguf THREADS N_PROMPT N_GEN REPS\n", argv[0]);
        return 2;
    }
    const char * path = argv[1];
    const int threads = std::atoi(argv[2]);
    const int n_prompt = std::atoi(argv[3]);
    const int n_gen = std::atoi(argv[4]);
    const int reps = std::atoi(argv[5]);
    if (threads < 1 || n_prompt < 1 || n_gen < 1 || reps < 1) {
        std::fprintf(stderr, "THREADS, N_PROMPT, N_GEN and REPS must be at least 1\n");
        return 2;
    }

    llama_log_set(quiet, nullptr);
    llama_backend_init();
    auto started = std::chrono::steady_clock::now();
    llama_model * model = llama_model_load_from_file(path, llama_model_default_params());
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", path);
        return 1;
    }
    const double load = seconds_since(started);

    llama_context_params params = llama_context_default_params();
    params.n_ctx = n_prompt + n_gen;
    params.n_batch = 512;
    params.n_ubatch = 512;
    params.n_threads = threads;
    params.n_threads_batch = threads;
    llama_context * ctx = llama_init_from_model(model, params);
    if (!ctx) {
        std::fprintf(stderr, "cannot create a context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::mt19937 rng(42);
    std::uniform_int_distribution<llama_token> token(0, n_vocab - 1);
    llama_batch batch = llama_batch_init(n_prompt, 0, 1);

    auto prompt = [&]() {
        llama_memory_clear(llama_get_memory(ctx), true);
        batch.n_tokens = n_prompt;
        for (int i = 0; i < n_prompt; i++) {
            batch.token[i] = token(rng);
            batch.pos[i] = i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = i == n_prompt - 1;
        }
        auto t = std::chrono::steady_clock::now();
        if (llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "decode failed\n");
            std::exit(1);
        }
        llama_synchronize(ctx);
        return seconds_since(t);
    };
    auto generate = [&]() {
        llama_memory_clear(llama_get_memory(ctx), true);
        auto t = std::chrono::steady_clock::now();
        for (int i = 0; i < n_gen; i++) {
            batch.n_tokens = 1;
            batch.token[0] = token(rng);
            batch.pos[0] = i;
            batch.n_seq_id[0] = 1;
            batch.seq_id[0][0] = 0;
            batch.logits[0] = 1;
            if (llama_decode(ctx, batch) != 0) {
                std::fprintf(stderr, "decode failed\n");
                std::exit(1);
            }
            llama_synchronize(ctx);
        }
        return seconds_since(t);
    };

    prompt();
    generate();
    std::vector<double> pp, tg;
    for (int r = 0; r < reps; r++) {
        pp.push_back(prompt());
    }
    for (int r = 0; r < reps; r++) {
        tg.push_back(generate());
    }
    report("pp", n_prompt, pp, load);
    report("tg", n_gen, tg, load);

    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
