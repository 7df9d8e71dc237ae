# kiln: build, test, run. `make` builds build/kiln and build/kiln-worker; `make test` runs
# every test (also under ASan+UBSan, and the ring's thread stress under TSan); `make run`
# installs what is missing, builds and serves the default model.

CC      ?= cc
CFLAGS  ?= -O2 -g
WARN     = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wformat=2 -Wundef -Wvla -Wpointer-arith -Wcast-align
SAN_asan = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_tsan = -fsanitize=thread -fno-omit-frame-pointer
PKGS     = libevent libevent_openssl openssl msgpack liburing jansson libpcre2-8 libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
override CFLAGS  += -std=c11 -D_GNU_SOURCE -Iinclude -pthread $(PKG_CFLAGS) $(WARN) \
                    $(if $(WERROR),-Werror) $(SAN_$(SAN))
override LDFLAGS += -pthread $(SAN_$(SAN))
LDLIBS   = $(PKG_LIBS) -lm

# build/ for the plain build, build-asan/ and build-tsan/ for the sanitizers
B       ?= build$(if $(SAN),-$(SAN))

COMMON_SRC = $(wildcard common/*.c)
SERVER_SRC = $(filter-out server/main.c,$(wildcard server/*.c))
WORKER_SRC = $(filter-out worker/main.c,$(wildcard worker/*.c))
TOOL_SRC   = $(wildcard tools/kiln-*.c)
TLIB_SRC   = $(wildcard tests/lib/*.c)
TEST_SRC   = $(wildcard tests/test_*.c)
BENCH_SRC  = $(wildcard tests/bench_*.c)
FUZZ_SRC   = $(wildcard tests/fuzz_*.c)

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
LIBCOMMON = $(B)/libcommon.a
LIBSERVER = $(B)/libserver.a
LIBWORKER = $(B)/libworker.a
LIBTEST   = $(B)/libtest.a
ALL_LIBS  = $(LIBSERVER) $(LIBWORKER) $(LIBCOMMON)

BINS   = $(B)/kiln $(B)/kiln-worker $(patsubst tools/%.c,$(B)/%,$(TOOL_SRC))
TESTS  = $(patsubst tests/%.c,$(B)/tests/%,$(TEST_SRC))
BENCHES= $(patsubst tests/%.c,$(B)/tests/%,$(BENCH_SRC))

# SIMD kernels get their instruction sets per file; the choice is made at run time
$(B)/obj/worker/kernels_avx2.o:   override CFLAGS += -mavx2 -mfma -mf16c
$(B)/obj/worker/kernels_avx2_ext.o: override CFLAGS += -mavx2 -mfma -mf16c
$(B)/obj/worker/kernels_avxvnni.o: override CFLAGS += -mavx2 -mfma -mf16c -mavxvnni
$(B)/obj/worker/kernels_avxvnni_ext.o: override CFLAGS += -mavx2 -mfma -mf16c -mavxvnni
$(B)/obj/worker/kernels_avx512.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl \
                                   -mavx512vnni -mavx2 -mfma -mf16c
$(B)/obj/worker/kernels_avx512_ext.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl \
                                   -mavx512vnni -mavx2 -mfma -mf16c
$(B)/obj/worker/gemm_avx512.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl \
                                   -mavx512vnni -mavx2 -mfma -mf16c
$(B)/obj/worker/gemm_avx512_cols.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl \
                                   -mavx512vnni -mavx2 -mfma -mf16c
$(B)/obj/worker/gemm_amx.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl \
                                   -mavx512vnni -mavx2 -mfma -mf16c -mamx-tile -mamx-int8
$(B)/obj/worker/gemm_amx_k.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl \
                                   -mavx512vnni -mavx2 -mfma -mf16c -mamx-tile -mamx-int8
$(B)/obj/worker/gemm_avx512_colsk.o: override CFLAGS += -mavx512f -mavx512bw -mavx512vl \
                                   -mavx512vnni -mavx2 -mfma -mf16c
$(B)/obj/worker/gemm_avx2.o: override CFLAGS += -mavx2 -mfma -mf16c
$(B)/obj/worker/gemm_avxvnni.o: override CFLAGS += -mavx2 -mfma -mf16c -mavxvnni
$(B)/obj/worker/gemm_avx2_cols.o: override CFLAGS += -mavx2 -mfma -mf16c
$(B)/obj/worker/gemm_avxvnni_cols.o: override CFLAGS += -mavx2 -mfma -mf16c -mavxvnni

.PHONY: all bins tests benches test test-unit test-asan test-tsan test-openai test-oracle oracle \
        test-webui bench run deps deps-test deps-browser fuzz fuzz-gguf fuzz-toolcall fuzz-http \
        fuzz-jinja soak clean
all: bins
bins: $(BINS)
tests: $(TESTS)
benches: $(BENCHES)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIBCOMMON): $(call obj,$(COMMON_SRC))
$(LIBSERVER): $(call obj,$(SERVER_SRC)) $(B)/obj/gen/webui_assets.o
$(LIBWORKER): $(call obj,$(WORKER_SRC))
$(LIBTEST):   $(call obj,$(TLIB_SRC))
$(B)/lib%.a:
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/kiln: $(call obj,server/main.c) $(LIBSERVER) $(LIBCOMMON)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(B)/kiln-worker: $(call obj,worker/main.c) $(LIBWORKER) $(LIBCOMMON)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(B)/kiln-%: $(B)/obj/tools/kiln-%.o $(LIBTEST) $(ALL_LIBS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(B)/tests/%: $(B)/obj/tests/%.o $(LIBTEST) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)

# The chat page (webui/) and its libraries are embedded into kiln as a generated C file. The
# libraries come from npm, pinned in webui/package-lock.json, installed under build/npm (one
# install for every build dir); where npm cannot install them the page is embedded without
# them and renders answers as plain text (the build and kiln's log say so).
WEBUI_SRC  = $(sort $(wildcard webui/*.html webui/*.css webui/*.js webui/*.svg))
WEBUI_NPM  = build/npm/webui
WEBUI_LIBS = /webui/lib/marked.js=$(WEBUI_NPM)/node_modules/marked/lib/marked.umd.js \
  /webui/lib/purify.js=$(WEBUI_NPM)/node_modules/dompurify/dist/purify.min.js \
  /webui/lib/highlight.js=$(WEBUI_NPM)/node_modules/@highlightjs/cdn-assets/highlight.min.js \
  /webui/lib/hl-light.css=$(WEBUI_NPM)/node_modules/@highlightjs/cdn-assets/styles/github.min.css \
  /webui/lib/hl-dark.css=$(WEBUI_NPM)/node_modules/@highlightjs/cdn-assets/styles/github-dark.min.css
NPM_CI = npm ci --no-audit --no-fund --prefer-offline --fetch-timeout=20000 --fetch-retries=1

$(WEBUI_NPM)/.stamp: webui/package.json webui/package-lock.json
	@mkdir -p $(WEBUI_NPM)
	@cp webui/package.json webui/package-lock.json $(WEBUI_NPM)/
	@if command -v npm >/dev/null && (cd $(WEBUI_NPM) && $(NPM_CI) >npm.log 2>&1); then \
	  echo "webui: installed marked, dompurify and highlight.js from npm"; \
	else \
	  echo "webui: npm could not install the page's libraries (see $(WEBUI_NPM)/npm.log);" \
	       "the chat page will render answers as plain text. rm -rf $(WEBUI_NPM) to retry."; \
	fi
	@touch $@

build/host/webui-embed: tools/webui-embed.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -D_GNU_SOURCE $(WARN) $(if $(WERROR),-Werror) -o $@ $< -lz

$(B)/gen/webui_assets.c: build/host/webui-embed $(WEBUI_SRC) $(WEBUI_NPM)/.stamp
	@mkdir -p $(dir $@)
	build/host/webui-embed $@.tmp /index.html=webui/index.html \
	  $(foreach f,$(filter-out webui/index.html,$(WEBUI_SRC)),/webui/$(notdir $(f))=$(f)) \
	  --libs $(WEBUI_LIBS)
	@mv $@.tmp $@
$(B)/obj/gen/webui_assets.o: $(B)/gen/webui_assets.c server/webui_assets.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iserver -c $< -o $@

# Every test binary runs from the project root; integration tests find the binaries through
# KILN_BIN_DIR and the shared data through KILN_SHARED.
TEST_ENV = KILN_BIN_DIR=$(CURDIR)/$(B) KILN_SHARED=$(CURDIR)/../shared
run_tests = set -e; for t in $(1); do echo "== $$t"; $(TEST_ENV) $$t; done

test: deps-test
	$(MAKE) bins tests
	$(MAKE) test-unit
	$(MAKE) test-asan
	$(MAKE) test-tsan
	$(MAKE) test-openai
	$(MAKE) test-oracle
	$(MAKE) test-webui
	$(MAKE) test-deploy
	@echo "make test: all suites passed"

# deploy/: the Kubernetes manifests against the API schemas (kubernetes-models, pinned in
# tests/deploy/package-lock.json), and nginx and haproxy in front of two kiln instances.
.PHONY: test-deploy
test-deploy: bins
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "test-deploy: skipped (node and npm are not installed)"; exit 0; fi; \
	cd tests/deploy && (npm ci --no-audit --no-fund >/dev/null 2>&1 || \
	  npm install --no-audit --no-fund) && $(TEST_ENV) node --test

test-unit: bins tests
	@$(call run_tests,$(TESTS))

test-asan:
	$(MAKE) SAN=asan bins tests
	@$(call run_tests,$(patsubst build/%,build-asan/%,$(TESTS)))

# The official openai npm client against kiln (tests/openai); skipped without node and npm.
test-openai: bins
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "test-openai: skipped (node and npm are not installed)"; exit 0; fi; \
	cd tests/openai && (npm ci --no-audit --no-fund >/dev/null 2>&1 || \
	  npm install --no-audit --no-fund) && $(TEST_ENV) node --test
	@# the same tests with the newest client (tests/openai-latest pins it)
	cd tests/openai-latest && (npm ci --no-audit --no-fund >/dev/null 2>&1 || \
	  npm install --no-audit --no-fund) && \
	  $(TEST_ENV) node --test ../openai/kiln.test.mjs ../openai/tools.test.mjs

# The oracle (tests/reference): llama.cpp through node-llama-cpp, pinned in package-lock.json.
# `make oracle` regenerates the committed fixtures from every model of
# tests/lib/oracle_models.c and checks kiln against them (and that llama.cpp still tells the
# stories260K Lily story); `make test-oracle` does the same comparison live into a scratch
# folder, leaving the fixtures alone (skipped without node and npm). test_oracle itself, in
# test-unit, needs neither: it reads the committed fixtures.
ORACLE_DIR = $(B)/oracle
oracle-setup = cd tests/reference && (npm ci --no-audit --no-fund >/dev/null 2>&1 || \
	  npm install --no-audit --no-fund) && cd ../.. && rm -rf $(ORACLE_DIR) && \
	  mkdir -p $(ORACLE_DIR)/models && $(B)/kiln-mkmodel --oracle $(ORACLE_DIR)/models
oracle: bins tests
	@$(oracle-setup)
	node tests/reference/oracle.mjs $(ORACLE_DIR)/models tests/reference/fixtures
	node tests/reference/oracle.mjs --story ../shared/models/stories260K.gguf
	KILN_ORACLE_VERBOSE=1 $(TEST_ENV) $(B)/tests/test_oracle
	rm -rf $(ORACLE_DIR)

test-oracle: bins tests
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "test-oracle: skipped (node and npm are not installed)"; exit 0; fi; \
	$(oracle-setup) && \
	node tests/reference/oracle.mjs $(ORACLE_DIR)/models $(ORACLE_DIR)/fixtures && \
	KILN_ORACLE_FIXTURES=$(ORACLE_DIR)/fixtures $(TEST_ENV) $(B)/tests/test_oracle && \
	rm -rf $(ORACLE_DIR)

# The chat page in a real browser (tests/webui): playwright-core from npm (pinned) driving
# Debian's Chromium headless against kiln on the mock and on stories260K; screenshots go to
# $(B)/webui-test/. Installs Chromium (and Node.js where missing) when run as root; skipped
# with a message where they cannot be had.
CHROMIUM ?= /usr/bin/chromium
test-webui: bins
	@if [ "$$(id -u)" = 0 ] && { ! command -v npm >/dev/null || [ ! -x $(CHROMIUM) ]; }; then \
	  $(MAKE) -s deps-browser || true; fi; \
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "test-webui: skipped (Node.js and npm are not installed: apt-get install nodejs npm)"; \
	  exit 0; fi; \
	if [ ! -x $(CHROMIUM) ]; then \
	  echo "test-webui: skipped (Chromium is not installed: apt-get install chromium)"; exit 0; fi; \
	cd tests/webui && if ! (npm ci --no-audit --no-fund >/dev/null 2>&1 || \
	  npm install --no-audit --no-fund); then \
	  echo "test-webui: skipped (npm could not install playwright-core)"; exit 0; fi; \
	$(TEST_ENV) KILN_WEBUI_ARTIFACTS=$(CURDIR)/$(B)/webui-test CHROMIUM=$(CHROMIUM) node --test

# What the browser tests need: Debian's Chromium, and Node.js with npm where the machine has
# none (a Node.js from elsewhere that brings its own npm is kept).
deps-browser:
	@missing=""; [ -x $(CHROMIUM) ] || missing="chromium"; \
	command -v npm >/dev/null || [ "$$(id -u)" != 0 ] || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing packages; run: sudo apt-get install -y $$missing"; exit 1; \
	  fi; \
	fi

TSAN_TESTS = $(wildcard tests/test_shm_ring_threads.c)
test-tsan:
	$(MAKE) SAN=tsan $(patsubst tests/%.c,build-tsan/tests/%,$(TSAN_TESTS))
	@$(call run_tests,$(patsubst tests/%.c,build-tsan/tests/%,$(TSAN_TESTS)))

bench: bins benches
	@set -e; for b in $(BENCHES); do echo "== $$b"; $(TEST_ENV) $$b; done

# `make soak` (not in CI, not in make test): SOAK_SECONDS (1200) of mixed traffic with faults
# and kills over 2 workers; nothing may be lost and the front's RSS and fds come back.
SOAK_SECONDS ?= 1200
soak: bins $(B)/tests/soak_front
	$(TEST_ENV) SOAK_SECONDS=$(SOAK_SECONDS) $(B)/tests/soak_front

# `make run` serves MODEL: by default models/stories260K.gguf, fetched from Hugging Face and
# checked against its sha256 when missing (a short timeout: no network is fine), else
# ../shared/models/stories260K.gguf. MODEL=path.gguf serves any other, MODEL=mock the mock.
# The URL is the one llama.cpp's own server tests use (repository ggml-org/models, file
# tinyllamas/stories260K.gguf).
MODEL ?=
STORIES     = models/stories260K.gguf
STORIES_URL = https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf
STORIES_SHA = 270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d
run: deps
	$(MAKE) bins
	@model="$(MODEL)"; \
	if [ -z "$$model" ]; then \
	  [ -f $(STORIES) ] || $(MAKE) -s $(STORIES) || true; \
	  model=$(STORIES); \
	  if [ ! -f $$model ] && [ -f ../shared/models/stories260K.gguf ]; then \
	    model=../shared/models/stories260K.gguf; fi; \
	  if [ ! -f $$model ]; then \
	    echo "no model: put a .gguf in $(STORIES), or MODEL=path.gguf / MODEL=mock"; exit 1; fi; \
	fi; \
	echo "serving $$model"; exec ./$(B)/kiln --model "$$model" $(ARGS)

$(STORIES):
	@mkdir -p $(dir $@)
	@echo "fetching $(STORIES_URL)"
	@if curl -fsSL --connect-timeout 5 --max-time 60 -o $@.part $(STORIES_URL) && \
	   echo "$(STORIES_SHA)  $@.part" | sha256sum -c --quiet -; then \
	  mv $@.part $@; \
	else \
	  rm -f $@.part; echo "could not fetch $@ (no network, or a bad checksum)"; exit 1; \
	fi

# Install what is missing (Debian 12). As root it runs apt-get; otherwise it prints the command.
# `deps` is what building and serving need (`make run`); `deps-test` adds what only the tests
# use: cmocka, and prometheus for promtool's check of /metrics. Node.js and npm (the chat
# page's libraries are npm packages) come from Debian, as root, where the machine has no npm
# at all; without them the page is built with plain-text answers.
DEBS      = build-essential pkg-config libevent-dev libmsgpack-dev liburing-dev \
            libjansson-dev libpcre2-dev libcurl4-openssl-dev libssl-dev zlib1g-dev curl
TEST_DEBS = libcmocka-dev prometheus systemd nginx-light haproxy
deps-test: override DEBS += $(TEST_DEBS)
deps deps-test:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v npm >/dev/null || [ "$$(id -u)" != 0 ] || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing packages; run: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

# Fuzz the GGUF reader with libFuzzer (clang; one process, one core) for FUZZ_SECONDS over a
# seed corpus generated at run time (small written files, stories260K's metadata, the heads of
# the vocabulary files). Crashes land in build-fuzz/crash-*.
FUZZ_SECONDS ?= 60
FUZZ_FLAGS = -std=c11 -D_GNU_SOURCE -Iinclude -O1 -g $(WARN)
fuzz: fuzz-gguf fuzz-toolcall fuzz-http fuzz-jinja

fuzz-gguf:
	@mkdir -p build-fuzz/corpus
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  tests/fuzz_gguf.c common/gguf.c -o build-fuzz/fuzz_gguf
	$(CC) $(FUZZ_FLAGS) -DFUZZ_GGUF_SEEDS tests/fuzz_gguf.c tests/lib/gguf_write.c common/gguf.c \
	  -o build-fuzz/fuzz_gguf_seeds
	build-fuzz/fuzz_gguf_seeds build-fuzz/corpus ../shared/models/stories260K.gguf
	for f in ../shared/vocab/*.gguf; do head -c 16384 $$f > build-fuzz/corpus/head-$${f##*/}; done
	build-fuzz/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus

# What clients send: kiln's HTTP request parser over any bytes in any piece sizes, and the
# generation routes' JSON body handling against the mock's model facts (tests/fuzz_http.c),
# for FUZZ_SECONDS. The front's sources go into an archive so only what the target needs is
# linked.
FUZZ_HTTP_SRC = $(filter-out server/main.c,$(wildcard server/*.c)) $(COMMON_SRC) \
                $(B)/gen/webui_assets.c
fuzz-http: $(B)/gen/webui_assets.c
	@mkdir -p build-fuzz/obj-http build-fuzz/corpus-http
	for f in $(FUZZ_HTTP_SRC); do \
	  clang $(FUZZ_FLAGS) $(PKG_CFLAGS) -Iserver -fsanitize=fuzzer-no-link,address,undefined \
	    -fno-sanitize-recover=all -c $$f -o build-fuzz/obj-http/$$(echo $$f | tr / _).o || exit 1; \
	done
	rm -f build-fuzz/libfront.a && ar rcs build-fuzz/libfront.a build-fuzz/obj-http/*.o
	clang $(FUZZ_FLAGS) $(PKG_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  tests/fuzz_http.c build-fuzz/libfront.a -o build-fuzz/fuzz_http $(PKG_LIBS) -lm
	printf '\000\007POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}' \
	  > build-fuzz/corpus-http/post
	printf '\000\003POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n' \
	  > build-fuzz/corpus-http/chunked
	printf '\001{"prompt":"hi","max_tokens":4,"n":2,"stop":["x"],"logprobs":2,"stream":true}' \
	  > build-fuzz/corpus-http/completion
	printf '\002{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":-100},"seed":1}' \
	  > build-fuzz/corpus-http/chat
	printf '\001{"prompt":[1,2,3],"response_format":{"type":"json_object"},"top_k":3}' \
	  > build-fuzz/corpus-http/ids
	printf '\003\007POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.0\r\n\r\n' \
	  > build-fuzz/corpus-http/parse-post
	printf '\003\002POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n2;x\r\nab\r\n0\r\nT: 1\r\n\r\n' \
	  > build-fuzz/corpus-http/parse-chunked
	build-fuzz/fuzz_http -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -print_final_stats=1 \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus-http

# The reply parser (tool calls, reasoning) on any model output, for FUZZ_SECONDS, from a
# corpus of every format's calls (tests/test_toolcall.c's replies are the seeds' shapes).
fuzz-toolcall:
	@mkdir -p build-fuzz/corpus-toolcall
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  $(PKG_CFLAGS) tests/fuzz_toolcall.c server/toolcall.c server/toolcall_body.c \
	  server/toolcall_json.c common/log.c -o build-fuzz/fuzz_toolcall $(PKG_LIBS)
	printf '\001\003ok <tool_call>{"name": "f", "arguments": {"a": [1, "}"]}}</tool_call>' \
	  > build-fuzz/corpus-toolcall/hermes
	printf '\022\001<think>x</think>[TOOL_CALLS][{"name": "f", "arguments": {}}]' \
	  > build-fuzz/corpus-toolcall/mistral
	printf '\005\002<\357\275\234tool\342\226\201calls\342\226\201begin\357\275\234>' \
	  > build-fuzz/corpus-toolcall/deepseek
	printf '\006\007all\nhi>>>f\n{"x": 1}' > build-fuzz/corpus-toolcall/functionary
	printf '\002\004<|python_tag|>f.call(q="x", n=1)' > build-fuzz/corpus-toolcall/python
	build-fuzz/fuzz_toolcall -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  -print_final_stats=1 -artifact_prefix=build-fuzz/ build-fuzz/corpus-toolcall

# Fuzz the Jinja engine: random templates x random JSON contexts (a template, a NUL byte, a
# JSON object), seeded with the 39 real templates and a conversation, under ASan+UBSan; the
# engine's step, depth and memory limits keep every run short. Crashes land in build-fuzz/.
JINJA_SRC = common/jinja_lex.c common/jinja_parse.c common/jinja_eval.c common/jinja_value.c \
            common/jinja_filters.c
fuzz-jinja:
	@mkdir -p build-fuzz/corpus-jinja
	clang $(FUZZ_FLAGS) $(PKG_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  tests/fuzz_jinja.c $(JINJA_SRC) -o build-fuzz/fuzz_jinja $(PKG_LIBS) -lm
	for f in ../shared/templates/*.jinja; do \
	  { cat $$f; printf '\0'; cat tests/fixtures/jinja/fuzz_context.json; } \
	    > build-fuzz/corpus-jinja/seed-$${f##*/}; done
	build-fuzz/fuzz_jinja -max_total_time=$(FUZZ_SECONDS) -max_len=32768 -timeout=10 \
	  -rss_limit_mb=1024 -dict=tests/fuzz_jinja.dict -print_final_stats=1 \
	  -artifact_prefix=build-fuzz/jinja- build-fuzz/corpus-jinja

clean:
	rm -rf build build-asan build-tsan build-fuzz
