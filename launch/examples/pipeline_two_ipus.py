"""A two-stage model pipelined over 2 simulated IPUs per replica, trained on the bundled Fashion-MNIST subset.

    poprun_py --num-replicas 2 --ipus-per-replica 2 python -m launch.examples.pipeline_two_ipus
    python -m launch.examples.pipeline_two_ipus --timeline-png timeline.png   # alone: one replica

It prints the memory fit per IPU, the pipeline's timeline per IPU, the loss per host call and the
validation accuracy.
"""

import argparse
from pathlib import Path

import poprun_py as popdist
from data.sources import SHIPPED_SUBSET
from ipu.runtime.loops import IPUInfeedQueue, IPUOutfeedQueue
from ipu.runtime.pipelining import OptimizerFunctionOutput, OptimizerSpec, PipelineSchedule, pipeline
from ipu.runtime.stages import cross_entropy, dense, dropout, flatten
from models.optim import OptimConfig

DATA = SHIPPED_SUBSET


def stage1(images):                      # on IPU 0
    x = flatten(images)
    x = dense(x, 256, activation="relu")
    return dropout(x, 0.1)


def stage2(x):                           # on IPU 1
    x = dense(x, 64, activation="relu")
    return dense(x, 10)


def optimizer_function(logits, labels):
    sgd = OptimizerSpec(learning_rate=0.02, config=OptimConfig("sgd", momentum=0.9))
    return OptimizerFunctionOutput(sgd, cross_entropy(logits, labels))


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10, help="host calls")
    parser.add_argument("--steps-per-call", type=int, default=10, help="weight updates per host call")
    parser.add_argument("--schedule", choices=["grouped", "interleaved", "sequential"], default="grouped")
    parser.add_argument("--timeline-png", type=Path, help="also draw the timeline (predicted IPU times) here")
    args = parser.parse_args()

    infeed = IPUInfeedQueue(DATA, batch_size=16)
    outfeed = IPUOutfeedQueue()
    pipe = pipeline(
        computational_stages=[stage1, stage2],
        gradient_accumulation_count=8,
        repeat_count=args.steps_per_call,
        infeed_queue=infeed,
        outfeed_queue=outfeed,
        optimizer_function=optimizer_function,
        device_mapping=[0, 1],
        pipeline_schedule=PipelineSchedule[args.schedule.capitalize()],
        recompute=True,
    )
    show = popdist.getInstanceIndex() == 0
    if show:
        print(pipe.memory_report())
        print(pipe.timeline())
    for call in range(args.calls):
        pipe.run()
        results = outfeed.dequeue()
        if show:
            print(f"host call {call + 1:3d}: loss {results['loss'].mean():.4f}, "
                  f"accuracy {results['accuracy'].mean():.3f} over updates {results['step'][0] + 1}-"
                  f"{results['step'][-1] + 1}")
    loss, accuracy, count = pipe.evaluate()
    if show:
        print(f"validation: loss {loss:.4f}, accuracy {accuracy:.4f} on {count} images")
        if args.timeline_png:
            print(f"timeline: {pipe.plot_timeline(args.timeline_png)}")


if __name__ == "__main__":
    main()
