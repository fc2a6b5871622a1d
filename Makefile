# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-examples test-locality test-skips test-mixture test-hub test-wheel test-repeat test-explore exit-soak test-ray test-torchft bench-torchft bench-live-history bench-live-locality test-torchtitan bench bench-shuffle bench-agreement bench-skip-agreement bench-exclusion bench-scaling bench-indexing bench-shards bench-ranged \
	bench-locality bench-read bench-cold bench-busy bench-packing bench-gpu bench-images bench-which bench-tail bench-scale soak lint clean test-accelerate-matrix test-transformers-matrix test-trainer-options bench-data-wait bench-ray \
	docs docs-build

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and alone: the local CPU wheel, so no later resolution can pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements-dev.txt -e .
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/shufflepoint demo

test: $(STAMP)
	$(PY) -m pytest -q

# End-to-end runs a lower-level test already covers, kept out of `make test` for its time budget
# (~1.5 min): the packed example killed and resumed, `shufflepoint audit` on the Hugging Face Trainer; the
# quick-start and sharded examples stopped and resumed (~1.3 min at load 5; make test-wheel, in CI, runs the
# quick start's stop and resume and an epoch of the sharded example from the installed wheel); the images
# example killed and resumed on 2 ranks and on 3 (81 s at load 6, 147 s at load 15; tests/distributed/test_images_resume.py
# keeps a fresh-process resume with workers in make test); the Accelerate patched and native examples, the
# Hugging Face Trainer example and the augmentation example stopped and resumed (~55 s; each test names the
# scenario of make test that covers its path); the online-mixing example (weights set from the sources' losses)
# killed and resumed (~20 s; tests/distributed/test_live_weights_resume.py covers its path in make test-mixture).
test-examples: $(STAMP)
	$(PY) -m pytest -q -m examples tests/distributed

# The stock Trainer options that change who reads what (split_batches, even_batches, ignore_data_skip) on 2
# processes, beside the stock Trainer (issue 44.5; ~25 s, 2 launches): tests/distributed/test_trainer_options.py
test-trainer-options: $(STAMP)
	$(PY) -m pytest -q -m trainer_options tests/distributed

# GET bytes per simulated node (own cache folder and S3 key) for a Mixture under spans, ~1 min (issue 33)
test-locality: $(STAMP)
	$(PY) -m pytest -q -s -m locality tests/distributed

# skip_bad_samples on real ranks: both deals, a Mixture of Packed and bucketed images (replace only); 0 and 2 workers,
# a SIGKILL and a resume in new processes, 2 -> 3 ranks, the limit (~2 min; not in make test)
test-skips: $(STAMP)
	$(PY) -m pytest -q -m skips tests/distributed/test_skip_resume.py tests/distributed/test_skip_groups.py

# A Mixture resized again and again (issues 43.0, 44.2): hypothesis over resize sequences and caps, and a scheduled
# Mixture of Packed corpora resized 16 -> 12 -> 6 rows a global batch in fresh processes; weights changed while
# training (issue 44.1), killed and resumed in fresh processes (+~45 s); ~5 min
test-mixture: $(STAMP)
	$(PY) -m pytest -q -m mixture tests/shards tests/distributed/test_mixture_resize.py tests/distributed/test_live_weights_resume.py

# Hugging Face Hub datasets (issue 46) against tests/hub_server.py, a local stand-in of the Hub's HTTP API, read
# by the real huggingface_hub client: pinning, the kept listing, named refusals, a 429 storm, and the resume on 2
# and 3 ranks in fresh processes with the bytes each simulated node fetched (tests/distributed/test_hub_resume.py).
test-hub: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m hub tests/shards/test_hub.py tests/distributed/test_hub_resume.py

# The release a user installs (tests/ci/check_wheel.py): python -m build (sdist, then the wheel from it); the wheel
# carries py.typed and nothing of tests/ or benchmarks/; installed into a fresh venv (torch==2.13.0 first and
# alone, the local CPU wheel), without and with [shards], it runs the quick start (stopped, resumed, batch for
# batch) and `shufflepoint demo` from outside the checkout; [shards] reads examples/shards.py's Parquet corpus.
# About 2.5 minutes here (144 s measured on the 2-CPU box).
test-wheel: $(STAMP)
	$(PY) tests/ci/check_wheel.py

# Flakiness as a number (tests/ci/repeat.py): the tests that start processes (tests/distributed and the files
# in repeat.PROCESS_FILES) run REPEAT times in a row (default 5), reruns off; every failure is printed with its
# test id, then each failing test's count. Exit 1 on any failure. TESTS=path... narrows it (to try it out).
REPEAT ?= 5
test-repeat: $(STAMP)
	$(PY) tests/ci/repeat.py --count $(REPEAT) --log-dir out/test-repeat $(TESTS)

# The property tests with fresh draws (make test draws the same examples every run: tests/conftest.py).
# A find prints its reproduction blob; pin it as an @example. About 2 minutes; RUNS=n repeats it.
RUNS ?= 1
test-explore: $(STAMP)
	for run in $$(seq $(RUNS)); do SHUFFLEPOINT_HYPOTHESIS=explore $(PY) -m pytest -q -p no:cacheprovider \
	  $$(grep -rl --include='test_*.py' -e 'from hypothesis' -e 'import hypothesis' tests) || exit 1; done

# Finished runs must exit 0 (benchmarks/exit_soak.py): each path (Trainer, a resized Trainer resume with
# destroy_process_group, native with and without destroy, Accelerate) RUNS times under torchrun, counted as ok,
# abort or hang. PATHS=a,b narrows it. ~20 min for RUNS=20 of every path on the 2-CPU box.
RUNS ?= 20
exit-soak: $(STAMP)
	$(PY) benchmarks/exit_soak.py --runs $(RUNS) --log-dir out/exit-soak $(if $(PATHS),--paths $(PATHS))

# torchtitan 0.3.0 as shufflepoint's data loader (examples/torchtitan_loader.py under torchrun, 30-80 s). Its
# wheel asks for datasets<4.8 and its trainer's tools (wandb, tensorboard), so it goes beside the venv, in
# .venv-titan/, with only what its data-pipeline modules import; the tests skip without it.
TITAN_STAMP := .venv-titan/.installed

$(TITAN_STAMP): $(STAMP)
	$(PY) -m pip install -q --no-deps --target .venv-titan torchtitan==0.3.0 tyro==1.0.17 docstring_parser==0.18.0 \
	  typeguard==4.6.1
	touch $@

test-torchtitan: $(TITAN_STAMP)
	$(PY) -m pytest -q tests/integrations/test_torchtitan.py tests/distributed/test_integration_torchtitan.py

bench: $(STAMP)
	$(PY) benchmarks/run.py

# Shuffle quality of the blocks order against a fully random order and Streaming's py1e (issue 11).
# Streaming's wheel is unpacked without its dependencies: only its numpy-only shuffle modules are used.
bench-shuffle: $(STAMP)
	test -f .venv-peers/streaming/streaming/base/shuffle/py1e.py || \
	  $(PY) -m pip install -q --no-deps --target .venv-peers/streaming mosaicml-streaming==0.13.0
	$(PY) benchmarks/shuffle_quality.py

# Rank agreement at load: one all_reduce of 24 bytes against gathering every rank's state, at 2-6 processes.
bench-agreement: $(STAMP)
	$(PY) benchmarks/agreement.py

# skip_bad_samples: the per-step agreement on 2 Gloo ranks, blocking against pipelined (~15 s)
bench-skip-agreement: $(STAMP)
	$(PY) benchmarks/skip_agreement.py

# loader.exclude: state bytes and per-batch cost with 10,000 scattered samples excluded, against none.
bench-exclusion: $(STAMP)
	$(PY) benchmarks/exclusion.py

# State bytes, the blocks order's per-epoch table up to 1e6 shards, and the shards one node reads in
# an epoch of 1e10 samples on 10,000 ranks, computed from the order (issue 12; about 30 s).
bench-scaling: $(STAMP)
	$(PY) benchmarks/scaling.py

# Bytes each simulated node (a torchrun agent with its own cache and S3 key) fetches from the local
# S3 server under the corpus deals: 1-8 nodes, a second epoch, re-deals 4 -> 3 and 4 -> 6 at 50%,
# resizes 4 -> 2, 3, 6 at a fixed global batch (issues 18, 27; benchmarks/locality.py). Full corpus
# (1.28 GB, built once in .bench-cache/) ~15 min; QUICK=1: 26 MB, ~5 min; RESIZES=1: the resizes only;
# RANGED=1: the fixed-global-batch resizes with ranged reads off and on, side by side.
# MIXTURES=1: the LLM pipelines (Packed, Mixture, scheduled) and the peers' mixtures (Streaming's streams with
# proportions, LitData's CombinedStreamingDataset; issue 33.7) in make bench-shards' peer venvs, built here
# if missing; ONLY=Packed: only the pipelines whose name holds it, no peers; PEERS=1: only our token Mixtures
# and the peers' (QUICK=1 PEERS=1: ~10 min on 2 loaded cores).
bench-locality: $(STAMP)
	$(if $(MIXTURES)$(PEERS),-$(MAKE) --no-print-directory -k .venv-bench-streaming/.installed .venv-bench-litdata/.installed)
	$(PY) benchmarks/locality.py $(if $(QUICK),--quick) $(if $(RESIZES),--resizes) $(if $(MIXTURES),--mixtures) \
	  $(if $(PEERS),--peers) $(if $(RANGED),--ranged-both) $(if $(ONLY),--only "$(ONLY)")

# Ranged reads on and off side by side over the S3 server (issue 33.4): the first batch, the steady rate
# (workers 0 and 4) and the GET bytes of a rank's share, tokens and Parquet, bench-shards' small corpus.
# About 5 minutes on 2 CPUs.
bench-ranged: $(STAMP)
	$(PY) benchmarks/shards/ranged.py $(if $(REPEATS),--repeats $(REPEATS))

# GET bytes per node before the first batch: 8 fresh nodes index Parquet, tokens and JSONL (with and
# without a published index) on the tests' S3 server behind the byte-counting proxy (issue 18.7).
bench-indexing: $(STAMP)
	$(PY) benchmarks/indexing.py $(if $(QUICK),--quick)

# One GPU kept fed (issue 25.8; benchmarks/gpu_feed.py): a ~125M Llama in bf16 on Packed Parquet rows of
# 2048 tokens at num_workers 0/4/8 vs the same steps on batches already on the GPU, and a kill and resume
# with bitwise-equal losses. Where CUDA is absent it says "no GPU" and exits 0 (nothing measured).
bench-gpu: $(STAMP)
	$(PY) benchmarks/gpu_feed.py
	$(PY) benchmarks/gpu_images.py

# Decoded images per second (issue 34; benchmarks/images.py): skimage's photos as WebDataset JPEGs, decode +
# random resized crop to 224 + flip, 2 workers, against webdataset (dev venv), Megatron-Energon and LitData,
# one run, ratios. The two peers go into .venv-peers/ with --no-deps (each would pull a CUDA torch): the modules
# their import needs, found by importing. Corpus and conversions cached in .bench-cache/images (the first run
# writes them, ~1 min). About 4 minutes on a quiet 2-core machine, 8 at a load average of 10.
ENERGON_PEER := .venv-peers/energon/.installed
LITDATA_PEER := .venv-peers/litdata/.installed

$(ENERGON_PEER): $(STAMP)
	$(PY) -m pip install -q --no-deps --target .venv-peers/energon megatron-energon==7.4.1 multi-storage-client==1.3.1 \
	  bracex==3.2.4 wcmatch==12.0.4 filetype==1.2.0 lark==1.3.1 mfusepy==3.1.1 rapidyaml==0.15.2 prettytable==3.19.0 \
	  wcwidth==0.9.4 deprecation==2.1.0 obstore==0.12.1 xattr==1.3.1 opentelemetry-api==1.45.3
	touch $@

$(LITDATA_PEER): $(STAMP)
	$(PY) -m pip install -q --no-deps --target .venv-peers/litdata litdata==0.2.76 lightning-utilities==0.15.3 \
	  filelock==4.3.2
	touch $@

bench-images: $(STAMP) $(ENERGON_PEER) $(LITDATA_PEER)
	$(PY) benchmarks/images.py

# Decoding on Ray actors (issue 45): RayDataLoader against Ray Data (read_webdataset, map_batches,
# iter_torch_batches), the same DecodeImage, on bench-images' photos (written by the main venv, which has
# scikit-image). benchmarks/ray_decode.py; docs/ray.md. About 10 minutes on a shared 2-core machine.
.PHONY: bench-ray
bench-ray: $(STAMP) .venv-ray/.installed  # RAY_STAMP, defined further down with the ray venv
	$(PY) -c "import sys; sys.path.insert(0, 'benchmarks'); import _photos; _photos.write_shards('.bench-cache/images/mixed-2000/photos', 2000, 100, sizes='mixed')"
	$(RAY_VENV)/bin/python benchmarks/ray_decode.py

# The read path against issue 19's targets: Parquet rows vs pyarrow's sequential decode, token windows
# per second, workers 0 and 2 (first batch and rate apart). About 2 minutes; QUICK=1 a tenth of the corpus.
bench-read: $(STAMP)
	$(PY) benchmarks/read_path.py $(if $(QUICK),--quick)

# A cold first batch (issue 28.1): fresh processes resume at 50% of an epoch of 200 token shards (1e5, 1e6,
# 1e7 windows), workers 0 and 2, import / construction / load_state_dict / first batch timed apart, LitData
# beside it when .venv-bench-litdata exists (make bench-shards builds it). About 5 minutes.
bench-cold: $(STAMP)
	$(PY) benchmarks/cold_start.py $(if $(wildcard .venv-bench-litdata/bin/python),--litdata .venv-bench-litdata/bin/python)

# The loader beside busy processes (issue 28.5): samples per CPU-second with 0, 2, 4 spinning processes,
# token windows and Parquet rows, torch's default threads and one. About 3 minutes.
bench-busy: $(STAMP)
	$(PY) benchmarks/busy_machine.py

# A slow sample does not stall the rest (issue 34.4): the loop's data wait with long-tailed sample costs (3% of
# samples 20x slower), prefetch_factor 2 and 8, decode_threads=4, torch's in_order=False for reference; then real
# clips of small and large videos (VideoClips). ~2.5 min; results in benchmarks/results/tail-*.md.
# The cost of measuring the data wait (DataLoader.data_wait()): the measurement's calls per batch, and an in-memory
# loader's batches/s with and without them (issue 44.4; ~1 min)
bench-data-wait: $(STAMP)
	$(PY) benchmarks/data_wait.py

bench-tail: $(STAMP)
	$(PY) benchmarks/tail.py
	$(PY) benchmarks/tail.py --videos --batch-size 4 --step 60 --batches 40 --warmup 4 --rounds 2 \
	  --only "prefetch_factor=2 (today)|prefetch_factor=8|decode_threads=4"

# Packed rows (issue 21): rows/s against fixed windows of the same tokens, the index, a resume's first
# batch, and at 1e9 tokens against Megatron-Core (computed), Grain (measured in its own venv, no torch,
# ~15 s to build) and torchtitan (computed). About 40 s; QUICK=1 a tenth of the corpus, 1e8 tokens.
GRAIN_VENV := .venv-grain
GRAIN_STAMP := $(GRAIN_VENV)/.installed

$(GRAIN_STAMP):
	$(PYTHON) -m venv $(GRAIN_VENV)
	$(GRAIN_VENV)/bin/python -m pip install -q grain==0.2.18
	touch $@

bench-packing: $(STAMP) $(GRAIN_STAMP)
	$(PY) benchmarks/packing.py $(if $(QUICK),--quick) --grain-python $(GRAIN_VENV)/bin/python
	$(PY) benchmarks/packing_tokenize.py $(if $(QUICK),--quick)

# which at step 1e7 (issue 26): a 1e9-sample corpus and a 1e12-token Packed corpus, answered from the
# checkpoint in fresh processes, against OLMo-core's global_indices, Megatron's --iterations-to-skip and a
# per-step log (benchmarks/which.py; about 2 minutes).
bench-which: $(STAMP)
	$(PY) benchmarks/which.py

# A 16,384-rank start (issue 33.6): per sampled rank, from construction to its first batch, fresh and resumed,
# after 16,384 -> 12,288 -> 16,384, over a stub storage serving a published index of 1e5 shards (1e12 tokens);
# which() at 16,384 ranks; 1,000 resizes in an epoch; and a real 32-process Gloo run (GLOO=0 skips it).
# benchmarks/scale.py; docs/scale.md. About 3 minutes, plus the Gloo run (minutes on 2 CPUs).
bench-scale: $(STAMP)
	$(PY) benchmarks/scale.py --gloo $(or $(GLOO),32)

# Ray Train (issue 14) on a real local Ray cluster: its own venv (1.5 GB), torch first and alone
# (the local CPU wheel), then the package with its [ray] extra. About 40 s to build, 70 s to run.
RAY_VENV := .venv-ray
RAY_STAMP := $(RAY_VENV)/.installed

$(RAY_STAMP): pyproject.toml
	$(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/python -m pip install -q --upgrade pip
	$(RAY_VENV)/bin/python -m pip install -q torch==2.13.0
	# images and video: the decode pool's tests carry DecodeImage and VideoClips batches (tests/ray/test_decode_pool.py)
	$(RAY_VENV)/bin/python -m pip install -q -e '.[ray,images,video]' pytest pytest-timeout pytest-rerunfailures hypothesis  # tests/conftest.py imports hypothesis
	touch $@

test-ray: $(RAY_STAMP)
	$(RAY_VENV)/bin/python -m pytest -q -p no:cacheprovider -m ray tests/ray

# torchft 0.2.0 (issue 43): shufflepoint's torchft DataLoader under a real Lighthouse, each replica group its own
# processes on Gloo, groups SIGKILLed, restarted, lost (tests/fault_tolerance). Its own venv: torch first and alone
# (the local CPU wheel), then torchft with torch pinned in the same resolve (its deps are torch>=2.7 and
# opentelemetry), then the package and the test tools. ~1 GB, ~1 min to build; ~5.5 min to run on the loaded 2 cores.
TORCHFT_VENV := .venv-torchft
TORCHFT_STAMP := $(TORCHFT_VENV)/.installed

$(TORCHFT_STAMP): pyproject.toml
	$(PYTHON) -m venv $(TORCHFT_VENV)
	$(TORCHFT_VENV)/bin/python -m pip install -q --upgrade pip
	$(TORCHFT_VENV)/bin/python -m pip install -q torch==2.13.0
	$(TORCHFT_VENV)/bin/python -m pip install -q torch==2.13.0 torchft==0.2.0
	$(TORCHFT_VENV)/bin/python -m pip install -q torch==2.13.0 -e . pytest pytest-timeout pytest-rerunfailures hypothesis numpy
	touch $@

test-torchft: $(TORCHFT_STAMP)
	$(TORCHFT_VENV)/bin/python -m pytest -q -p no:cacheprovider -m torchft tests/fault_tolerance

# torchft's own data path (its DistributedSampler into torchdata's StatefulDataLoader) against shufflepoint's for the
# same failures on real torchft, and the loader's cost of a membership change (benchmarks/live_membership.py;
# results in benchmarks/results/torchft.md), with a slow transform at num_workers 0 and 2: a fixed world against a
# change every 20 steps, the steady rate and a change's cost in share reads. torchdata joins the torchft venv.
# About 7 minutes.
bench-torchft: $(TORCHFT_STAMP)
	$(TORCHFT_VENV)/bin/python -m pip install -q torch==2.13.0 torchdata==0.11.0
	$(TORCHFT_VENV)/bin/python benchmarks/live_membership.py

# The live loader's history over 1k, 10k and 100k membership changes (issue 43.2): state bytes, save and load times,
# `which` and `shufflepoint which` checked against every served step (benchmarks/results/live_history.md). Plain
# .venv; about 3 minutes.
bench-live-history: $(STAMP)
	$(VENV)/bin/python benchmarks/live_history.py

# Locality of a corpus under the live loader (issue 43): 3 groups, one lost and back; shards each group touches and
# its reads inside its own stretch, lots read in order (0.6.0) against stretches (benchmarks/results/live_locality.md).
# Plain .venv; about 10 s.
bench-live-locality: $(STAMP)
	$(VENV)/bin/python benchmarks/live_locality.py

# The documentation site (issue 46.3): mkdocs-material over README.md (the home page), docs/*.md and an API
# reference mkdocstrings renders from the docstrings (mkdocs.yml, docs/_site/hooks.py). Its own venv, every
# package pinned in docs/_site/requirements.txt; no torch (griffe reads src/ without importing it). About 15 s
# to build the venv. Nothing is fetched at build (no web fonts, no analytics).
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed
DOCS_PORT ?= 8000

$(DOCS_STAMP): docs/_site/requirements.txt
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q --upgrade pip
	$(DOCS_VENV)/bin/python -m pip install -q -r docs/_site/requirements.txt
	touch $@

# The site on http://127.0.0.1:$(DOCS_PORT), rebuilt on every edit of docs/, README.md, CHANGELOG.md, src/.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs serve -a 127.0.0.1:$(DOCS_PORT)

# CI: the site built with --strict into out/site: a broken link or anchor, a docs/*.md left out of mkdocs.yml's
# nav, or a public name without a docstring fails it. Then tests/docs_site (marker docs) builds broken copies
# of the tree to prove that each of those fails it, and checks the home page's links and the API reference.
docs-build: $(DOCS_STAMP) $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir out/site
	$(PY) -m pytest -q -p no:cacheprovider -m docs tests/docs_site

soak: $(STAMP)
	SHUFFLEPOINT_SOAK_CYCLES=$${CYCLES:-30} $(PY) -m pytest -q -s -m soak tests

# ruff on everything, and the strict type check on the package (its settings are in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) $(RAY_VENV) $(TORCHFT_VENV) $(GRAIN_VENV) $(DOCS_VENV) $(SHARDS_VENVS) .venv-transformers-* .pytest_cache .hypothesis

# One venv per claimed release of an integration's library, torch first and alone (the local CPU
# wheel), then that release; runs the integration's tests and prints one line per version.
# $(call version-matrix,NAME,VERSIONS,PIP REQUIREMENTS with $$v for the version,TESTS,STATUS SO FAR,SUMMARY SO FAR)
define version-matrix
status=$(5); summary="$(6)"; \
for v in $(2); do \
  env=.venv-$(1)-$$v; \
  if [ ! -f $$env/.installed ]; then \
    $(PYTHON) -m venv $$env && \
    $$env/bin/python -m pip install -q --upgrade pip && \
    $$env/bin/python -m pip install -q torch==2.13.0 && \
    $$env/bin/python -m pip install -q $(3) pytest pytest-timeout pytest-rerunfailures hypothesis numpy && \
    $$env/bin/python -m pip install -q -e . && \
    touch $$env/.installed || { status=1; summary="$$summary\n$(1) $$v: INSTALL FAILED"; continue; }; \
  fi; \
  echo "== $(1) $$v"; \
  if $$env/bin/python -m pytest -q -p no:cacheprovider $(4) > $$env/last-run.log 2>&1; \
  then result=passed; tail -n 1 $$env/last-run.log; \
  else result=FAILED; status=1; tail -n 80 $$env/last-run.log; fi; \
  summary="$$summary\n$(1) $$v: $$result ($$(tail -n 1 $$env/last-run.log | tr -d '='))"; \
done; \
printf "$$summary\n"; exit $$status
endef

# The Accelerate integration against every Accelerate release it claims (issue 3).
ACCELERATE_VERSIONS ?= 1.13.0 1.14.0 1.15.0
ACCELERATE_TESTS := tests/integrations/test_accelerate_patch.py tests/distributed/test_accelerate_resume.py \
	tests/integrations/test_accelerate_native.py tests/distributed/test_accelerate_native_resume.py

test-accelerate-matrix:
	@$(call version-matrix,accelerate,$(ACCELERATE_VERSIONS),accelerate==$$v torchdata==0.11.0,$(ACCELERATE_TESTS),0)

# The Trainer integration (issue 20) against the transformers releases it claims: the newest (5.25.0)
# in the dev stack, each older one in its own venv (4.57.1 wants huggingface-hub<1, so it cannot
# share the dev venv).
TRANSFORMERS_VERSIONS := 4.57.1
TRANSFORMERS_TESTS := -m 'examples or not examples' tests/integrations/test_transformers_placement.py tests/integrations/test_transformers_trainer.py \
	tests/integrations/test_transformers_ramp.py tests/distributed/test_integration_transformers.py tests/distributed/test_audit_trainer.py \
	tests/distributed/test_trainer_options.py

# TRANSFORMERS_DEV=0 leaves out the dev stack's run (CI: make test and make test-examples run those tests there).
TRANSFORMERS_DEV ?= 1
test-transformers-matrix: $(STAMP)
	@if [ "$(TRANSFORMERS_DEV)" = 0 ]; then dev="left out (TRANSFORMERS_DEV=0)"; dev_status=0; else \
	echo "== transformers $$($(PY) -c 'import transformers; print(transformers.__version__)') (dev stack)"; \
	if $(PY) -m pytest -q -p no:cacheprovider $(TRANSFORMERS_TESTS) > $(VENV)/transformers-last-run.log 2>&1; \
	then dev=passed; dev_status=0; tail -n 1 $(VENV)/transformers-last-run.log; \
	else dev=FAILED; dev_status=1; tail -n 80 $(VENV)/transformers-last-run.log; fi; fi; \
	$(call version-matrix,transformers,$(TRANSFORMERS_VERSIONS),transformers==$$v accelerate==1.13.0,$(TRANSFORMERS_TESTS),$$dev_status,\ntransformers (dev stack): $$dev)

# Sharded loading side by side with Streaming, LitData and HF streaming (issue 12), in one run:
# benchmarks/shards/run.py (docs/benchmarks-shards.md). One venv per peer, torch first and alone
# (the local CPU wheel), then the peer with torch pinned again in the same resolve (litdata alone
# would upgrade torch to a CUDA build). Corpus and conversions cached in .bench-cache/ (~6 GB).
# QUICK=1: the small corpus (2e5 samples), one repeat.
SHARDS_VENVS := .venv-bench-streaming .venv-bench-litdata .venv-bench-hf

.venv-bench-%/.installed:
	$(PYTHON) -m venv .venv-bench-$*
	.venv-bench-$*/bin/python -m pip install -q --upgrade pip
	.venv-bench-$*/bin/python -m pip install -q torch==2.13.0
	$(MAKE) --no-print-directory peer-$*
	touch $@

# mosaicml-streaming without its dependencies: it requires torchvision, and no torchvision imports
# beside the CPU torch (pip would swap torch for a CUDA build). These are the modules its import
# needs (found by importing), plus boto3 for s3://; peer_streaming.py stubs the two torchvision names.
.PHONY: peer-streaming peer-litdata peer-hf
peer-streaming:
	.venv-bench-streaming/bin/python -m pip install -q --no-deps mosaicml-streaming==0.13.0
	.venv-bench-streaming/bin/python -m pip install -q torch==2.13.0 'numpy<2.2' 'transformers<5' brotli \
	  python-snappy zstd 'xxhash<4' pillow catalogue boto3 psutil
peer-litdata:
	.venv-bench-litdata/bin/python -m pip install -q torch==2.13.0 litdata==0.2.76 psutil
peer-hf:
	.venv-bench-hf/bin/python -m pip install -q torch==2.13.0 datasets==5.2.0 s3fs psutil

# A peer venv that cannot be built (no network) does not stop the run: run.py leaves that peer out
# and says so (on the console and in shards.md).
bench-shards: $(STAMP)
	-$(MAKE) --no-print-directory -k $(patsubst %,%/.installed,$(SHARDS_VENVS))
	$(PY) benchmarks/shards/run.py $(if $(QUICK),--quick --repeats 1)
