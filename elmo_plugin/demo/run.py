"""
`make demo` (`python -m elmo_plugin.demo.run`): the three steps of the ELMo recipe on a
corpus the demo generates, with the `allennlp` command line, in a few minutes on a laptop.

1. generate a corpus where "bats", "bank", "plant" and "spring" each occur in two senses;
2. train a small biLM on it (`allennlp train training_config/bilm/demo.jsonnet`) and report
   its held-out perplexity;
3. export it (`allennlp elmo-export`) and embed test sentences (`allennlp elmo --all`);
4. report how similar each word's vectors are within a sense and across senses, per layer,
   and draw them (PNG);
5. train a sense tagger with `elmo_token_embedder` on the exported files, and without;
6. list the artefacts and the commands to reuse them.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Sequence

from elmo_plugin.common.installation import TRAINING_CONFIG_DIR
from elmo_plugin.demo.corpus import GeneratedSentence, generate_sentences, tagged_line
from elmo_plugin.demo.sense_report import (
    format_table,
    plot_senses,
    read_word_vectors,
    sense_similarities,
)

# The installed package's configs (a clone's training_config/ links to them).
CONFIGS = TRAINING_CONFIG_DIR


def write_lines(path: str, lines: Sequence[str]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in lines)
    return path


def write_corpus(directory: str, train_sentences: int, seed: int) -> Dict[str, object]:
    """The demo's text files; different seeds keep held-out and test text apart from training."""
    os.makedirs(directory, exist_ok=True)
    train = [s.text for s in generate_sentences(train_sentences, seed)]
    heldout = [s.text for s in generate_sentences(max(train_sentences // 20, 50), seed + 1)]
    senses = [s for s in generate_sentences(400, seed + 2, filler_fraction=0.0)]
    tagging_train = list(generate_sentences(200, seed + 3))
    tagging_dev = list(generate_sentences(200, seed + 4))
    return {
        "train": write_lines(os.path.join(directory, "train.txt"), train),
        "heldout": write_lines(os.path.join(directory, "heldout.txt"), heldout),
        "senses": write_lines(os.path.join(directory, "senses.txt"), [s.text for s in senses]),
        "sense_sentences": senses,
        "tagging_train": write_lines(
            os.path.join(directory, "tagging_train.txt"), [tagged_line(s) for s in tagging_train]
        ),
        "tagging_dev": write_lines(
            os.path.join(directory, "tagging_dev.txt"), [tagged_line(s) for s in tagging_dev]
        ),
    }


def allennlp(arguments: List[str], environment: Dict[str, str] = None) -> None:
    """Runs `allennlp ARGUMENTS` with the plugin loaded, showing its normal output."""
    command = [sys.executable, "-m", "elmo_plugin", *arguments]
    print(f"\n$ allennlp {' '.join(arguments)}", flush=True)
    completed = subprocess.run(command, env={**os.environ, **(environment or {})})
    if completed.returncode != 0:
        raise SystemExit(f"demo: `allennlp {arguments[0]}` failed (exit {completed.returncode}).")


# Marks a directory as the demo's own, which the next run may replace.
DEMO_MARKER = ".elmo_plugin_demo"


def prepare_output_directory(output: str) -> str:
    """An empty `output`; a previous demo's is replaced, anything else is refused (the demo
    runs in the user's directories: it must never delete their files)."""
    if os.path.exists(output):
        if not os.path.isdir(output) or (os.listdir(output) and not os.path.exists(os.path.join(output, DEMO_MARKER))):
            raise SystemExit(
                f"demo: {output} exists and is not a previous demo's output; give another --output "
                "or remove it yourself."
            )
        shutil.rmtree(output)
    os.makedirs(output)
    open(os.path.join(output, DEMO_MARKER), "w").close()
    return output


def banner(text: str) -> None:
    print(f"\n{'=' * 78}\n{text}\n{'=' * 78}", flush=True)


def main(argv: Sequence[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", default="demo_output",
                        help="the demo's directory (replaced at every run); default: ./demo_output")
    parser.add_argument("--train-sentences", type=int, default=30000)
    parser.add_argument("--epochs", type=int, default=3, help="biLM training epochs")
    parser.add_argument("--tagger-epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.time()
    output = prepare_output_directory(os.path.abspath(args.output))

    banner("1. A generated corpus with ambiguous words")
    corpus = write_corpus(os.path.join(output, "corpus"), args.train_sentences, args.seed)
    sense_sentences: List[GeneratedSentence] = corpus["sense_sentences"]  # type: ignore
    print(f"{args.train_sentences} training sentences in {corpus['train']}, e.g.:")
    for sentence in sense_sentences[:4]:
        print(f"    {sentence.text}    ({sentence.word}: {sentence.sense})")

    banner("2. Train a biLM (char CNN + 2-layer biLSTM, sampled softmax)")
    bilm_dir = os.path.join(output, "bilm")
    allennlp(
        [
            "train", os.path.join(CONFIGS, "bilm", "demo.jsonnet"), "-s", bilm_dir,
            "-o", json.dumps({
                "train_data_path": corpus["train"],
                "validation_data_path": corpus["heldout"],
                "trainer.num_epochs": args.epochs,
                "random_seed": args.seed, "numpy_seed": args.seed, "pytorch_seed": args.seed,
            }),
        ]
    )
    with open(os.path.join(bilm_dir, "metrics.json")) as handle:
        bilm_metrics = json.load(handle)
    perplexity = bilm_metrics["best_validation_perplexity"]

    banner("3. Export the biLM as ELMo files and embed test sentences")
    elmo_dir = os.path.join(output, "elmo")
    allennlp(["elmo-export", bilm_dir, elmo_dir])
    options_file = os.path.join(elmo_dir, "options.json")
    weight_file = os.path.join(elmo_dir, "weights.hdf5")
    vectors_file = os.path.join(output, "senses.hdf5")
    allennlp(["elmo", str(corpus["senses"]), vectors_file, "--all", "--deterministic",
              "--options-file", options_file, "--weight-file", weight_file])

    banner("4. Do the layers tell the senses apart?")
    vectors = read_word_vectors(vectors_file, sense_sentences)
    similarities = sense_similarities(sense_sentences, vectors)
    picture = os.path.join(output, "senses.png")
    plot_senses(sense_sentences, vectors, picture, layers=(0, len(vectors[0]) - 1))

    banner("5. A sense tagger with and without ELMo")
    environment = {
        "DEMO_TAGGING_TRAIN": str(corpus["tagging_train"]),
        "DEMO_TAGGING_DEV": str(corpus["tagging_dev"]),
        "DEMO_ELMO_OPTIONS": options_file,
        "DEMO_ELMO_WEIGHTS": weight_file,
    }
    scores = {}
    for name in ("sense_tagger_no_elmo", "sense_tagger_elmo"):
        serialization_dir = os.path.join(output, name)
        allennlp(
            ["train", os.path.join(CONFIGS, "demo", f"{name}.jsonnet"), "-s", serialization_dir,
             "-o", json.dumps({"trainer.num_epochs": args.tagger_epochs})],
            environment,
        )
        with open(os.path.join(serialization_dir, "metrics.json")) as handle:
            scores[name] = json.load(handle)["best_validation_f1-measure-overall"]

    banner("Results")
    print(f"biLM held-out perplexity (full softmax): {perplexity:.2f} "
          f"(forward {bilm_metrics['best_validation_forward_perplexity']:.2f}, backward "
          f"{bilm_metrics['best_validation_backward_perplexity']:.2f}; "
          f"vocabulary of {_vocabulary_size(elmo_dir)} words)")
    print("\nMean cosine similarity of an ambiguous word's vectors, within one sense and across")
    print("its two senses (400 test sentences). Layer 0 is the char CNN: context-free, so every")
    print("occurrence of a word has the same vector. Layers 1-2 are the biLSTM's:\n")
    print(format_table(similarities))
    print(f"\nPicture (layer 0 beside the top layer, coloured by sense): {picture}")
    print("\nSense tagging span F1 on 200 held-out sentences (trained on 200; the tagger has no")
    print("encoder, so context can only come from the token vectors):")
    print(f"    word embeddings only:          {scores['sense_tagger_no_elmo']:.3f}")
    print(f"    word embeddings + ELMo:        {scores['sense_tagger_elmo']:.3f}")
    print(f"""
Artefacts (in {output}):
    corpus/                      the generated text (train, held-out, test, tagging data)
    bilm/model.tar.gz            the trained biLM (AllenNLP archive)
    elmo/options.json, elmo/weights.hdf5, elmo/vocab.txt
                                 the biLM as ELMo files (the published layout)
    senses.hdf5                  all biLM layers of corpus/senses.txt
    senses.png                   the picture
    sense_tagger_elmo/model.tar.gz, sense_tagger_no_elmo/model.tar.gz

Reuse them:
    allennlp evaluate {bilm_dir}/model.tar.gz {corpus['heldout']}
    allennlp elmo my_sentences.txt my_vectors.hdf5 --all --options-file {options_file} --weight-file {weight_file}
    allennlp predict {output}/sense_tagger_elmo/model.tar.gz my_tagging_input.jsonl
    in a config: "elmo": {{"type": "elmo_token_embedder", "options_file": "{options_file}",
                          "weight_file": "{weight_file}", "do_layer_norm": false, "dropout": 0.5}}
Your own corpus instead: README.md, "Steps 1 and 2: train your own biLM".
(demo finished in {(time.time() - started) / 60:.1f} minutes)""")


def _vocabulary_size(elmo_dir: str) -> int:
    with open(os.path.join(elmo_dir, "vocab.txt"), encoding="utf-8") as handle:
        return sum(1 for _ in handle)


if __name__ == "__main__":
    main()
