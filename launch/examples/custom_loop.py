"""A training loop of your own, data-parallel over instances and replicas, from the project's pieces.

    python -m launch.examples.custom_loop
    poprun_py --num-instances 2 --num-replicas 4 python -m launch.examples.custom_loop

What ``poprun-train`` does, spelled out: PopDist's indices say which replicas this instance runs;
the sharded loader gives it their uint8 images (``data.Loader``: each instance reads only its share
of every global batch); each micro-batch is normalised on the "device" (``ipu.runtime.normalise``),
goes forward and backward through the model; the gradients of every micro-batch of every replica
are summed and all-reduced across the instances (``ipu.runtime.gradients.GradientAllReduce``, the
engine's all-reduce); the same optimizer step runs on every instance. The global batch is the same
whatever the split (micro-batch x accumulation x total replicas), and so are the losses.
"""

import argparse

import numpy as np

import poprun_py as popdist
from data import SHIPPED_SUBSET, BatchSpec, Loader, evaluation_loader, open_dataset
from ipu.runtime.gradients import GradientAllReduce
from ipu.runtime.normalise import normalise
from models import build_model, softmax_cross_entropy
from models.optim import OptimConfig, make_optimizer


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHIPPED_SUBSET), help="dataset file (default: the bundled subset)")
    parser.add_argument("--steps", type=int, default=60, help="weight updates")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--grad-accum", type=int, default=2)
    args = parser.parse_args()

    popdist.init()
    comm = popdist.get_comm()
    index, local = popdist.getInstanceIndex(), popdist.getNumLocalReplicas()
    total = popdist.getNumTotalReplicas()
    spec = BatchSpec(micro_batch=args.micro_batch, grad_accum=args.grad_accum, local_replicas=local,
                     num_instances=popdist.getNumInstances(), instance_index=index)
    train = open_dataset(args.data, "train")
    info = train.info
    loader = Loader(train, spec, seed=42, augment=True)   # this instance's share, uint8 [local, A, M, H, W, C]

    model = build_model("dense-mnist", num_classes=info.num_classes, seed=0)
    params = model.params()
    for p in params:                                      # every instance starts from instance 0's weights
        comm.broadcast(p.data, root=0)
    optimizer = make_optimizer(OptimConfig(name="sgd", momentum=0.9), params)
    grads = GradientAllReduce(params, comm)

    step = 0
    while step < args.steps:
        batches = iter(loader)                            # one epoch; a thread builds the next batches
        for batch in batches:
            grads.zero()
            loss_sum = np.zeros(1)
            for r in range(local):                        # this instance's replicas
                for a in range(args.grad_accum):          # gradient accumulation
                    x = normalise(batch.images[r, a], info.mean, info.std)   # on the device
                    loss, dlogits = softmax_cross_entropy(model.forward(x, training=True), batch.labels[r, a])
                    model.backward(dlogits, need_dx=False)                 # writes every p.grad
                    grads.add()
                    loss_sum += loss
            grads.allreduce_mean(total * args.grad_accum)  # one collective: the mean over the global batch
            optimizer.step(0.05)
            comm.allreduce(loss_sum, op="sum")
            step += 1
            if index == 0 and step % 20 == 0:
                print(f"update {step}: loss {loss_sum[0] / (total * args.grad_accum):.4f} "
                      f"(global batch {spec.global_batch})")
            if step == args.steps:
                break
        batches.close()                                   # stops the loader's thread inside an epoch

    correct = np.zeros(2)                                 # [correct, counted] over every instance
    for batch in evaluation_loader(open_dataset(args.data, "validation"), spec):
        for r in range(local):
            for a in range(args.grad_accum):
                logits = model.forward(normalise(batch.images[r, a], info.mean, info.std), training=False)
                keep = batch.mask[r, a]
                correct += [np.sum(logits.argmax(1)[keep] == batch.labels[r, a][keep]), np.sum(keep)]
    comm.allreduce(correct, op="sum")
    if index == 0:
        print(f"validation accuracy {correct[0] / correct[1]:.4f} on {int(correct[1])} images")


if __name__ == "__main__":
    main()
