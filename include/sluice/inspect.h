// `sluice inspect`: what a model file holds and what one decoded token reads from it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sluice {

struct inspect_options {
    bool full_arrays = false;  // JSON: every array element (otherwise arrays over 64 are elided)
};

struct inspect_report {
    struct key {
        std::string name;        // "llama.block_count"
        std::string type;        // "u32", "string", "array"
        std::string text;        // for people: strings cut at 100 chars, long arrays "[49152 strings]"
        std::string json;        // the value as JSON text (elided arrays: null, see array_length)
        uint64_t array_length = 0;  // arrays only
        std::string array_elem;     // arrays only: the element type
    };
    struct tensor {
        std::string name;
        std::string type;            // "Q4_K"
        std::vector<int64_t> shape;  // GGML order, ne[0] first
        uint64_t bytes = 0;
        std::string group;           // one of the group names below
    };
    struct group {
        std::string name;            // embeddings, attention/dense, routed experts, shared experts, output
        uint64_t tensors = 0;
        uint64_t bytes = 0;
        uint64_t bytes_per_token = 0;  // what one decoded token reads from this group
    };

    std::string path;
    std::string format;        // "gguf" or "safetensors"
    std::string architecture;
    std::string name;          // general.name, "" when absent
    std::vector<key> hyperparameters;  // the "<arch>.*" keys
    std::vector<key> keys;             // every key, sorted
    std::vector<tensor> tensors;       // file order
    std::vector<group> groups;         // the five groups, always in that order
    int64_t expert_count = 0;          // 0 for dense models
    int64_t expert_used_count = 0;
    bool output_tied = false;          // no output.weight: token_embd.weight is read again
    uint64_t total_bytes = 0;
    uint64_t bytes_per_token = 0;
};

// Opens `path` (GGUF file, split part or Hugging Face directory) and describes it.
// Throws sluice::error on a file that does not open.
inspect_report inspect_model(const std::filesystem::path& path, const inspect_options& opt = {});

std::string format_text(const inspect_report& r);
std::string format_json(const inspect_report& r);

}  // namespace sluice
