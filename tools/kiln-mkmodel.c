/* kiln-mkmodel: write a random-weight Llama-family GGUF with a real vocabulary, for tests
 * and benchmarks of the engine's speed and plumbing (its text is noise). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/lib/model_gen.h"
#include "../tests/lib/oracle_models.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln-mkmodel --out FILE.gguf [--vocab VOCAB.gguf]\n"
               "         (--preset tinyllama|smollm|tiny|qwen2.5-0.5b|qwen3-0.6b|gemma2-2b|gemma3-1b|\n"
               "                   phi3-mini|granite-2b|smollm3-3b | --dim N --layers N --heads N\n"
               "          --kv-heads N --ffn N --ctx N)\n"
               "         [--type TYPE | --quant PRESET]\n"
               "         [--arch llama|qwen2|qwen3|gemma2|gemma3|phi3|granite|smollm3]\n"
               "         [--head-dim N] [--window N] [--rope-scaling yarn|longrope|linear]\n"
               "         [--peak X] [--seed N] [--tied]\n"
               "       kiln-mkmodel --oracle DIR\n"
               "TYPE (every matrix): f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q2_k q3_k q4_k\n"
               "    q5_k q6_k iq4_xs\n"
               "PRESET (llama-quantize's mix of types, with its fallbacks for rows that are not\n"
               "    multiples of 256): Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M\n"
               "    Q6_K IQ4_XS IQ4_NL Q4_0 Q4_1 Q5_0 Q5_1 Q8_0\n"
               "Without --vocab the model gets a synthetic 512-token SentencePiece vocabulary.\n"
               "--peak X scales the output so the logits' spread is about X (greedy text is then\n"
               "the same in any two correct implementations). --oracle writes every model of the\n"
               "llama.cpp comparison (tests/lib/oracle_models.c) into DIR with DIR/manifest.json.\n");
}

static int num(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v <= 0 || v > (1 << 24))
        return -EINVAL;
    *out = (int)v;
    return 0;
}

/* Every oracle model into dir, and dir/manifest.json naming each file and its prompts. */
static int write_oracle(const char *dir)
{
    char path[4096], name[64], err[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/manifest.json", dir);
    if (!(f = fopen(path, "w"))) {
        perror(path);
        return 1;
    }
    fprintf(f, "{\"ctx\": %d, \"top\": %d, \"steps\": %d, \"greedy\": %d, \"prompts\": [",
            ORACLE_CTX, ORACLE_TOP, ORACLE_STEPS, ORACLE_GREEDY);
    for (int p = 0; p < ORACLE_PROMPTS; p++) {
        uint32_t ids[ORACLE_MAX_PROMPT];
        int n = oracle_prompt(p, ids);
        fprintf(f, "%s[", p ? ", " : "");
        for (int i = 0; i < n; i++)
            fprintf(f, "%s%u", i ? ", " : "", ids[i]);
        fprintf(f, "]");
    }
    fprintf(f, "],\n \"models\": [");
    for (int i = 0; i < oracle_model_count(); i++) {
        struct model_gen_opts o;
        if (oracle_model(i, name, sizeof(name), &o, NULL) < 0) {
            fprintf(stderr, "kiln-mkmodel: oracle model %d has an unknown type\n", i);
            fclose(f);
            return 1;
        }
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
        if (model_gen_write(&o, path, err, sizeof(err)) < 0) {
            fprintf(stderr, "kiln-mkmodel: %s: %s\n", name, err);
            fclose(f);
            return 1;
        }
        fprintf(f, "%s\n  {\"name\": \"%s\", \"file\": \"%s.gguf\"}", i ? "," : "", name, name);
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0) {
        perror("manifest.json");
        return 1;
    }
    fprintf(stderr, "kiln-mkmodel: wrote %d oracle models into %s\n", oracle_model_count(), dir);
    return 0;
}

int main(int argc, char **argv)
{
    struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 1, .verbose = 1};
    const char *out = NULL;
    char err[512];
    static const struct option longs[] = {
        {"out", required_argument, NULL, 'o'},     {"vocab", required_argument, NULL, 'v'},
        {"preset", required_argument, NULL, 'p'},  {"dim", required_argument, NULL, 'd'},
        {"layers", required_argument, NULL, 'l'},  {"heads", required_argument, NULL, 'h'},
        {"kv-heads", required_argument, NULL, 'k'}, {"ffn", required_argument, NULL, 'f'},
        {"ctx", required_argument, NULL, 'c'},     {"type", required_argument, NULL, 't'},
        {"arch", required_argument, NULL, 'a'},    {"seed", required_argument, NULL, 's'},
        {"tied", no_argument, NULL, 'T'},          {"help", no_argument, NULL, 'H'},
        {"quant", required_argument, NULL, 'q'},
        {"head-dim", required_argument, NULL, 'D'}, {"window", required_argument, NULL, 'w'},
        {"rope-scaling", required_argument, NULL, 'r'}, {"peak", required_argument, NULL, 'P'},
        {"oracle", required_argument, NULL, 'O'},
        {NULL, 0, NULL, 0},
    };
    int c, bad = 0;

    while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'v': o.vocab_path = optarg; break;
        case 'p':
            if (model_gen_preset(&o, optarg) < 0) {
                fprintf(stderr, "kiln-mkmodel: unknown preset %s\n", optarg);
                return 2;
            }
            break;
        case 'd': bad |= num(optarg, &o.dim); break;
        case 'l': bad |= num(optarg, &o.layers); break;
        case 'h': bad |= num(optarg, &o.heads); break;
        case 'k': bad |= num(optarg, &o.kv_heads); break;
        case 'f': bad |= num(optarg, &o.ffn); break;
        case 'c': bad |= num(optarg, &o.ctx); break;
        case 't':
            if ((o.type = model_gen_type(optarg)) == GGML_TYPE_COUNT) {
                fprintf(stderr, "kiln-mkmodel: unknown type %s\n", optarg);
                return 2;
            }
            break;
        case 'q':
            if (model_gen_quant_base(optarg) == GGML_TYPE_COUNT) {
                fprintf(stderr, "kiln-mkmodel: unknown quantization preset %s\n", optarg);
                return 2;
            }
            o.quant = optarg;
            break;
        case 'a':
            if (!model_gen_arch_known(optarg)) {
                fprintf(stderr, "kiln-mkmodel: unknown arch %s (llama, qwen2, qwen3, gemma2, "
                                "gemma3, phi3, granite, smollm3)\n", optarg);
                return 2;
            }
            o.arch = optarg;
            break;
        case 's': o.seed = strtoull(optarg, NULL, 0); break;
        case 'T': o.tied = 1; break;
        case 'D': bad |= num(optarg, &o.head_dim); break;
        case 'w': bad |= num(optarg, &o.window); break;
        case 'r':
            if (strcmp(optarg, "yarn") && strcmp(optarg, "longrope") && strcmp(optarg, "linear")) {
                fprintf(stderr, "kiln-mkmodel: unknown rope scaling %s\n", optarg);
                return 2;
            }
            o.rope_scaling = optarg;
            break;
        case 'P': o.peak = strtof(optarg, NULL); bad |= !(o.peak > 0.0f && o.peak < 1000.0f); break;
        case 'O': return write_oracle(optarg);
        case 'H': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (bad || !out || optind < argc || !o.dim || !o.layers || !o.heads || !o.ffn || !o.ctx) {
        usage(stderr);
        return 2;
    }
    if (!o.kv_heads)
        o.kv_heads = o.heads;
    if (model_gen_write(&o, out, err, sizeof(err)) < 0) {
        fprintf(stderr, "kiln-mkmodel: %s\n", err);
        return 1;
    }
    fprintf(stderr, "kiln-mkmodel: wrote %s\n", out);
    return 0;
}
