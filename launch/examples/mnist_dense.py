"""Dense layers on MNIST-style 28x28 images, one simulated IPU, infeed, outfeed, several steps per host call.

    python -m launch.examples.mnist_dense
    poprun_py --num-replicas 2 python -m launch.examples.mnist_dense      # two data-parallel replicas

It trains on the bundled Fashion-MNIST subset (MNIST's format, clothing instead of digits); give
``--data`` a file made with ``poprun-data convert idx`` to train on the MNIST digits.
"""

import argparse
from pathlib import Path

import poprun_py as popdist
from data.sources import SHIPPED_SUBSET
from ipu.runtime.loops import IPUInfeedQueue, IPUOutfeedQueue, repeat
from ipu.runtime.pipelining import OptimizerFunctionOutput, OptimizerSpec
from ipu.runtime.stages import cross_entropy, dense, flatten

DATA = SHIPPED_SUBSET


def model(images):
    x = flatten(images)
    x = dense(x, 128, activation="relu")
    x = dense(x, 128, activation="relu")
    return dense(x, 10)


def optimizer_function(logits, labels):
    return OptimizerFunctionOutput(OptimizerSpec(learning_rate=0.05), cross_entropy(logits, labels))


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="dataset file (default: the bundled subset)")
    parser.add_argument("--calls", type=int, default=20, help="host calls")
    parser.add_argument("--steps-per-call", type=int, default=10, help="weight updates per host call")
    args = parser.parse_args()

    infeed = IPUInfeedQueue(args.data, batch_size=32)
    outfeed = IPUOutfeedQueue()
    train = repeat(args.steps_per_call, model, infeed, outfeed, optimizer_function)
    show = popdist.getInstanceIndex() == 0
    for call in range(args.calls):
        train.run()                                   # steps_per_call weight updates on the IPU
        results = outfeed.dequeue()                   # one loss and accuracy per update
        if show:
            print(f"host call {call + 1:3d}: loss {results['loss'].mean():.4f} (mean of {len(results['loss'])} updates)")
    loss, accuracy, count = train.evaluate()
    if show:
        print(f"validation: loss {loss:.4f}, accuracy {accuracy:.4f} on {count} images")


if __name__ == "__main__":
    main()
