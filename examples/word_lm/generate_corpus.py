"""Write a small synthetic corpus (train.txt, valid.txt, test.txt) for main.py.

Sentences come from a fixed random Markov chain over a 300-word vocabulary, so there is
structure a language model can learn and nothing has to be downloaded.

    python generate_corpus.py --out data
"""

import argparse
import os
import random


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="data", help="folder to write the three files into")
    parser.add_argument("--words", type=int, default=300, help="vocabulary size")
    parser.add_argument("--seed", type=int, default=1111)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    vocab = [f"w{i}" for i in range(args.words)]
    # each word is followed by one of a few likely successors
    successors = {w: rng.sample(vocab, 4) for w in vocab}
    os.makedirs(args.out, exist_ok=True)
    for name, sentences in (("train", 1500), ("valid", 150), ("test", 150)):
        lines = []
        for _ in range(sentences):
            word = rng.choice(vocab)
            words = [word]
            for _ in range(rng.randint(6, 14)):
                word = rng.choice(successors[word]) if rng.random() < 0.9 else rng.choice(vocab)
                words.append(word)
            lines.append(" ".join(words))
        with open(os.path.join(args.out, f"{name}.txt"), "w") as handle:
            handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
