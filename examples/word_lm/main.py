"""A word-level LSTM language model in the style of PyTorch's classic example script.

Its own flags, a manual SGD update without torch.optim, gradient clipping by --clip, the
learning rate divided by 4 when validation stops improving, the validation loss and
perplexity printed after each epoch and the test ones at the end, and torch.save(model). It
knows nothing about remedy: remedy runs it unchanged.

    python generate_corpus.py --out data
    python main.py --data data --epochs 2 --lr 20 --clip 0.25
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn


class Dictionary:
    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]


class Corpus:
    def __init__(self, path: str) -> None:
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, "train.txt"))
        self.valid = self.tokenize(os.path.join(path, "valid.txt"))
        self.test = self.tokenize(os.path.join(path, "test.txt"))

    def tokenize(self, path: str) -> torch.Tensor:
        ids = []
        with open(path) as handle:
            for line in handle:
                for word in line.split() + ["<eos>"]:
                    ids.append(self.dictionary.add_word(word))
        return torch.tensor(ids, dtype=torch.long)


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout if nlayers > 1 else 0.0)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, data: torch.Tensor, hidden: tuple) -> tuple[torch.Tensor, tuple]:
        emb = self.drop(self.encoder(data))
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(output)), hidden

    def init_hidden(self, bsz: int) -> tuple:
        weight = next(self.parameters())
        zeros = weight.new_zeros(self.nlayers, bsz, self.nhid)
        return (zeros, zeros.clone())


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h: tuple) -> tuple:
    return tuple(v.detach() for v in h)


def main() -> None:
    parser = argparse.ArgumentParser(description="word-level LSTM language model")
    parser.add_argument("--data", default="data", help="folder with train/valid/test.txt")
    parser.add_argument("--emsize", type=int, default=32)
    parser.add_argument("--nhid", type=int, default=32)
    parser.add_argument("--nlayers", type=int, default=1)
    parser.add_argument("--lr", type=float, default=20)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--log-interval", type=int, default=50)
    parser.add_argument("--save", default="model.pt", help="where the final model is saved")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    corpus = Corpus(args.data)
    train_data = batchify(corpus.train, args.batch_size)
    val_data = batchify(corpus.valid, 10)
    test_data = batchify(corpus.test, 10)
    ntokens = len(corpus.dictionary.idx2word)
    model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout)
    criterion = nn.NLLLoss()

    def evaluate(source: torch.Tensor) -> float:
        model.eval()
        total, hidden = 0.0, model.init_hidden(10)
        with torch.no_grad():
            for i in range(0, source.size(0) - 1, args.bptt):
                data, targets = get_batch(source, i, args.bptt)
                output, hidden = model(data, hidden)
                logp = torch.log_softmax(output.view(-1, ntokens), dim=1)
                total += len(data) * criterion(logp, targets).item()
        return total / (len(source) - 1)

    lr, best_val = args.lr, None
    batches = len(range(0, train_data.size(0) - 1, args.bptt))
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden, started = model.init_hidden(args.batch_size), time.time()
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            hidden = repackage_hidden(hidden)
            model.zero_grad()
            output, hidden = model(data, hidden)
            loss = criterion(torch.log_softmax(output.view(-1, ntokens), dim=1), targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():  # plain SGD, by hand
                p.data.add_(p.grad, alpha=-lr)
            if batch % args.log_interval == 0:
                line = f"epoch {epoch} batch {batch}/{batches} lr {lr:g} loss {loss.item():.3f}"
                print(line, flush=True)
        val_loss = evaluate(val_data)
        ppl = math.exp(min(val_loss, 700))
        print(
            f"end of epoch {epoch} ({time.time() - started:.1f} s): valid loss {val_loss:.3f} "
            f"valid ppl {ppl:.1f}",
            flush=True,
        )
        if best_val is None or val_loss < best_val:
            best_val = val_loss
        else:
            lr /= 4.0
    test_loss = evaluate(test_data)
    test_ppl = math.exp(min(test_loss, 700))
    print(f"End of training | test loss {test_loss:.3f} | test ppl {test_ppl:.1f}", flush=True)
    with open(args.save, "wb") as handle:
        torch.save(model, handle)


if __name__ == "__main__":
    main()
