#!/usr/bin/env bash
# make_fuzz_seeds.sh BUILD_DIR: writes the starting seeds of tests/fuzz/corpus/{adapter,tree,cli,
# tokenizer} (corpus/gguf has make_gguf_seeds.py). The committed corpora are these seeds grown by
# libFuzzer and minimised with -merge=1 (docs/testing.md, "Growing a corpus"); rerun this only to
# change the starting points.
#   adapter    adapters for the fuzz targets' tiny model (fuzz_model.h), written by
#              edgespec-mkadapter: with and without pruning, LoRA, one or three streams
#   tree       byte strings for fuzz_tree.c: a flatten of a chain, a bushy tree, a forest, a cycle;
#              raw batches with and without each optional array
#   cli        NUL-separated argv words: every option kind, --name=value, --, --help, bad values
#   tokenizer  op byte + text for each vocabulary, and a vocabulary description
set -euo pipefail
build=${1:?usage: make_fuzz_seeds.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
c=$here/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$build/tools/mkmodel/edgespec-mkmodel" -o "$tmp/tiny.gguf" --quiet --n-vocab 260 --n-embd 32 --n-layer 2 \
  --n-head 2 --n-head-kv 1 --n-ff 32 --n-ctx 64 --seed 5
mkad() { "$build/tools/mkadapter/edgespec-mkadapter" -m "$tmp/tiny.gguf" -o "$c/adapter/$1" "${@:2}"; }
mkad seed-default.ss.gguf --gamma 3 --n-msa 1 --prune-rank 4
mkad seed-plain.ss.gguf --gamma 1 --n-msa 2 --prune-rank 0
mkad seed-lora.ss.gguf --gamma 2 --n-msa 1 --prune-rank 2 --prune-layer 2 --lora-rank 2 --std 0.5

/usr/bin/python3 - "$c" <<'PY'
import os, struct, sys
c = sys.argv[1]
def put(d, name, b):
    with open(os.path.join(c, d, name), "wb") as f:
        f.write(b)
# tree: mode byte (bit 7 raw batch; flatten: 0x40 raw n, 0x20 the context's n_past, 0x10 raw parents)
put("tree", "seed-chain", bytes([0x20, 7]) + bytes(range(7)))
put("tree", "seed-bushy", bytes([0x20, 12]) + bytes([0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5]))
put("tree", "seed-forest", bytes([0x30, 6, 1, 1, 2, 1, 3, 4]))        # parents -1, -1, 0, -1, 1, 2
put("tree", "seed-cycle", bytes([0x30, 3, 3, 4, 2]))                  # 1 -> 2 -> 0 -> 1
put("tree", "seed-too-big", bytes([0x20, 23]) + bytes(23))
put("tree", "seed-batch-chain", bytes([0x8e, 4]) + bytes([5, 2, 0, 255, 1] * 4))
put("tree", "seed-batch-tree", bytes([0x80, 5]) + bytes([9, 2, 0, 3, 1, 10, 3, 0, 1, 0] * 3))
put("tree", "seed-batch-bad-token", bytes([0x9f, 2, 255, 0x7f, 0xff, 0xff, 0xff, 2, 0, 0, 1]))
# cli: argv words
def words(*w):
    return b"\0".join(x.encode() for x in w)
put("cli", "seed-run", words("-m", "model.gguf", "-p", "hello", "-n", "32", "--temp", "0", "--seed", "7"))
put("cli", "seed-eq", words("--n-predict=5", "--top-p=0.5", "--backend=vulkan", "--ignore-eos", "a", "b"))
put("cli", "seed-spec", words("--spec", "stream", "--gamma", "3", "--prune", "0.1", "--ss", "x.ss.gguf",
                              "--spec", "draft", "-md", "d.gguf", "--lookahead", "4", "--fixed-tree"))
put("cli", "seed-backend", words("-t", "1024", "-c", "16777216", "-b", "512", "--vk-flags",
                                 "no-fp16,no-subgroup", "--device", "cpu", "--profile"))
put("cli", "seed-bad", words("-n", "2147483648", "--temp", "nan", "--seed", "-3", "--top-k", "1e3", "--", "-x"))
put("cli", "seed-help", words("--repeat-last-n", "-1", "--help"))
put("cli", "useed-usage", words("-s", "0x10", "--vk-flags", "0x3f,fallbacks"))
# tokenizer: byte 0 picks the vocabulary (low 3 bits), add_special (8), parse_special (16);
# op >> 5 >= 6 builds a vocabulary from the data
put("tokenizer", "seed-spm", b"\x00Hello world, this is a test.")
put("tokenizer", "seed-gpt2", b"\x01 It's 12345 dollars!\n\tOK")
put("tokenizer", "seed-special", b"\x18<s>a</s> <unk>\xe2\x96\x81b")
put("tokenizer", "seed-small", b"\x02abcabc \xc3\xa9\xe6\x88\x91 123")
put("tokenizer", "seed-llama3", b"\x04'sLL  theabc\xff\xfe")
put("tokenizer", "seed-build", b"\xc1\x01\x03a\nb\nab\nc\x00a b\nab c\x00\x01\x01\x01\x01\x00\x02\x00")
PY
echo "seeds written under $c"
