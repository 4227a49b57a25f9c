"""Megatron-LM: parallel-size arguments, layout checks and a per-GPU memory estimate, before the job queues.

The estimate follows Megatron-LM's own ``megatron/training/theoretical_memory_usage.py`` for weights + gradients
+ optimizer state (18 bytes/parameter with mixed precision and Adam; ``6 + 12/DP`` with the distributed optimizer)
and Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models") for activations:
per layer and micro-batch ``s*b*h*34/t`` bytes with sequence parallelism (flash attention, Megatron's default,
never stores the ``5*a*s/h`` score term that selective recomputation was designed to drop; it is added for
``--attention-backend unfused|local``), ``2*s*b*h/t`` (the layer input only) with full recomputation.
With 1F1B the first pipeline stage holds PP micro-batches of L/PP layers, i.e. about L layers' worth.
It is an estimate (no allocator fragmentation, no CUDA context, no framework buffers): the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from slurmkit.errors import UsageError

PARALLEL_FLAGS = {
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "ep": "--expert-model-parallel-size",
}
_GIB = 1024**3


def arg_value(args: tuple[str, ...], flag: str) -> str | None:
    """The value of ``--flag V`` or ``--flag=V`` in ``args`` (last one wins, like argparse)."""
    found = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(flag + "="):
            found = a.split("=", 1)[1]
    return found


def _int_arg(args: tuple[str, ...], flag: str) -> int | None:
    v = arg_value(args, flag)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError as exc:
        raise UsageError(f"megatron argument {flag}: expected an integer, got {v!r}") from exc


def parallel_args(sizes: dict[str, int], args: tuple[str, ...]) -> tuple[str, ...]:
    """Megatron arguments for the parallel sizes, refusing a conflicting value already in the script args."""
    out: list[str] = []
    for key, flag in PARALLEL_FLAGS.items():
        given = _int_arg(args, flag)
        if given is not None:
            if given != sizes[key]:
                raise UsageError(f"--{key} {sizes[key]} conflicts with {flag} {given} in the script arguments")
            continue  # already there, same value: do not repeat it
        out += [flag, str(sizes[key])]
    return tuple(out)


@dataclass(frozen=True)
class ModelArgs:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    micro_batch_size: int
    ffn_hidden_size: int
    vocab_size: int
    num_query_groups: int
    num_experts: int
    moe_ffn_hidden_size: int
    swiglu: bool
    untied_embeddings: bool
    learned_position_embeddings: bool
    distributed_optimizer: bool
    recompute: str  # none | selective | full
    sequence_parallel: bool
    vocab_assumed: bool
    unfused_attention: bool = False
    global_batch_size: int | None = None
    virtual_pp: int | None = None  # interleaved schedule: model chunks per pipeline stage
    group_query_attention: bool = False


def model_args(args: tuple[str, ...]) -> ModelArgs | None:
    """Parse the model shape off a Megatron command line; None when the core sizes are not all there."""
    layers = _int_arg(args, "--num-layers")
    hidden = _int_arg(args, "--hidden-size")
    heads = _int_arg(args, "--num-attention-heads")
    seq = _int_arg(args, "--seq-length")
    if None in (layers, hidden, heads, seq):
        return None
    assert layers is not None and hidden is not None and heads is not None and seq is not None
    swiglu = "--swiglu" in args
    ffn = _int_arg(args, "--ffn-hidden-size")
    if ffn is None:
        # Megatron's default: 4h, or 4h*2/3 rounded up to a multiple of 64 with SwiGLU (arguments.py)
        ffn = int(4 * hidden * 2 / 3 / 64 + 0.999) * 64 if swiglu else 4 * hidden
    vocab = _int_arg(args, "--padded-vocab-size") or _int_arg(args, "--vocab-size")
    vocab_assumed = vocab is None
    if vocab is None:
        vocab = 50304  # GPT-2's 50257 padded to a multiple of 128, Megatron's usual padded size
    gran = arg_value(args, "--recompute-granularity")
    if gran in ("full", "selective"):
        recompute = gran
    elif "--recompute-activations" in args:
        recompute = "selective"
    else:
        recompute = "none"
    experts = _int_arg(args, "--num-experts") or 0
    return ModelArgs(
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        seq_length=seq,
        micro_batch_size=_int_arg(args, "--micro-batch-size") or 1,
        ffn_hidden_size=ffn,
        vocab_size=vocab,
        num_query_groups=_int_arg(args, "--num-query-groups") or heads if "--group-query-attention" in args else heads,
        num_experts=experts,
        moe_ffn_hidden_size=_int_arg(args, "--moe-ffn-hidden-size") or ffn,
        swiglu=swiglu,
        untied_embeddings="--untie-embeddings-and-output-weights" in args,
        learned_position_embeddings=arg_value(args, "--position-embedding-type") in (None, "learned_absolute"),
        distributed_optimizer="--use-distributed-optimizer" in args,
        recompute=recompute,
        sequence_parallel="--sequence-parallel" in args,
        vocab_assumed=vocab_assumed,
        unfused_attention=arg_value(args, "--attention-backend") in ("unfused", "local"),
        global_batch_size=_int_arg(args, "--global-batch-size"),
        virtual_pp=virtual_pp(args, layers).chunks,
        group_query_attention="--group-query-attention" in args,
    )


# Megatron-LM's own derivation of the interleaved schedule's model chunks per pipeline rank
# (megatron/training/arguments.py, validate_args; NVIDIA/Megatron-LM d98e8a64dd):
#   * at most one of --num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank,
#     --pipeline-model-parallel-layout;
#   * --num-layers-per-virtual-pipeline-stage N: "number of layers per pipeline stage must be divisible number of
#     layers per virtual pipeline stage"; V = (num_layers / PP) / N, where num_layers counts one more layer each for
#     --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split, and the flag may not be
#     combined with --decoder-first/last-pipeline-num-layers;
#   * --num-virtual-stages-per-pipeline-rank V: V itself;  V == 1 is no interleaving;
#   * with interleaving, PP > 1 (PP > 2 with --no-overlap-p2p-communication).
# --virtual-pipeline-model-parallel-size is no Megatron-LM argument since dcef906978 (2021, "Change argument to
# control the number of model chunks in a stage"); its parser (allow_abbrev=False) refuses it.
VIRTUAL_FLAGS = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
                 "--pipeline-model-parallel-layout")


@dataclass(frozen=True)
class VirtualPP:
    chunks: int | None  # model chunks per pipeline rank (None: no interleaving, or unknown)
    errors: tuple[str, ...] = ()  # Megatron's own startup assertions that would fail
    note: str = ""  # why the interleaving is not in the estimate, when it is asked for but not derived


def virtual_pp(args: tuple[str, ...], layers: int | None, pp: int | None = None) -> VirtualPP:
    """The interleaved schedule's chunks per pipeline rank as Megatron-LM derives them (see VIRTUAL_FLAGS); ``pp``
    defaults to --pipeline-model-parallel-size in ``args``."""
    pp = pp or _int_arg(args, "--pipeline-model-parallel-size") or 1
    given = [f for f in VIRTUAL_FLAGS if arg_value(args, f) is not None]
    if "--virtual-pipeline-model-parallel-size" in args or any(
            a.startswith("--virtual-pipeline-model-parallel-size=") for a in args):
        return VirtualPP(None, ("--virtual-pipeline-model-parallel-size is not a Megatron-LM argument (arguments.py "
                                "refuses it): give --num-layers-per-virtual-pipeline-stage or "
                                "--num-virtual-stages-per-pipeline-rank",))
    if len(given) > 1:
        return VirtualPP(None, (f"{' and '.join(given)}: Megatron-LM takes at most one of {', '.join(VIRTUAL_FLAGS)}",))
    if not given:
        return VirtualPP(None)
    if given[0] == "--pipeline-model-parallel-layout":
        return VirtualPP(None, note="--pipeline-model-parallel-layout: the interleaved schedule's extra activations "
                                    "(x 1 + (PP-1)/(PP*V)) are not in this estimate")
    if given[0] == "--num-virtual-stages-per-pipeline-rank":
        v = _int_arg(args, given[0])
    else:
        per = _int_arg(args, given[0])
        uneven = [f for f in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")
                  if arg_value(args, f) is not None]
        if uneven:
            return VirtualPP(None, (f"--num-layers-per-virtual-pipeline-stage with {uneven[0]}: Megatron-LM asks for "
                                    "--num-virtual-stages-per-pipeline-rank with uneven pipeline stages",))
        if layers is None:
            return VirtualPP(None, note="--num-layers-per-virtual-pipeline-stage without --num-layers: the "
                                        "interleaved schedule's extra activations are not in this estimate")
        n = layers + ("--account-for-embedding-in-pipeline-split" in args) + ("--account-for-loss-in-pipeline-split"
                                                                              in args)
        if n % pp:
            return VirtualPP(None)  # Megatron's "divisible by pipeline model parallel size": check_layout says it
        if not per or (n // pp) % per:
            return VirtualPP(None, (f"--num-layers-per-virtual-pipeline-stage {per} does not divide the {n // pp} "
                                    f"layers per pipeline stage ({n} / PP={pp})",))
        v = n // pp // per
    if not v or v < 1:
        return VirtualPP(None, (f"{given[0]} {v}: must be a positive integer",))
    if v == 1:
        return VirtualPP(None)
    need = 2 if "--no-overlap-p2p-communication" in args else 1
    if pp <= need:
        return VirtualPP(None, (f"interleaved schedule ({v} chunks per pipeline rank) needs PP > {need}"
                                + (" with --no-overlap-p2p-communication" if need == 2 else "") + f", got PP={pp}",))
    return VirtualPP(v)


def layer_activation_coefficient(m: ModelArgs) -> float:
    """Bytes of stored activations per layer in units of s*b*h (bf16), Korthikanti et al. 2022 §4 generalised
    to the FFN size, SwiGLU and grouped-query attention: attention 7 + 4*kv/h (QKV input 2, Q 2, K and V 2*kv/h
    each, output-projection input 2, dropout mask 1), MLP 3 + 4*f/h (fc1 input 2, activation input 2f/h and output
    2f/h, dropout mask 1; SwiGLU's fc1 produces 2f: 3 + 6*f/h), two layer norms 4. 34 for f = 4h, kv = h (the
    paper's number; Megatron's theoretical_memory_usage.py: 18 + 4*f/h)."""
    h = m.hidden_size
    kv = h * m.num_query_groups / m.num_attention_heads
    ffn = m.moe_ffn_hidden_size if m.num_experts else m.ffn_hidden_size
    mlp = 3 + (6 if m.swiglu else 4) * ffn / h
    return 7 + 4 * kv / h + mlp + 4


@dataclass(frozen=True)
class MemoryEstimate:
    params_total: int
    params_per_gpu: int  # on the most loaded (first) pipeline stage
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float  # with the recomputation the arguments ask for
    activations_no_recompute_gib: float
    activations_full_recompute_gib: float
    gpu_gib: float  # 0 when unknown
    distributed_optimizer: bool
    recompute: str
    notes: tuple[str, ...] = ()

    @property
    def static_gib(self) -> float:
        return self.weights_gib + self.grads_gib + self.optimizer_gib

    @property
    def total_gib(self) -> float:
        return self.static_gib + self.activations_gib

    def lines(self) -> list[str]:
        dist = "distributed optimizer" if self.distributed_optimizer else "no distributed optimizer"
        out = [
            f"megatron memory estimate per GPU (first pipeline stage, {self.params_per_gpu / 1e9:.2f}B of "
            f"{self.params_total / 1e9:.2f}B parameters):",
            f"  weights {self.weights_gib:.1f} GiB + gradients {self.grads_gib:.1f} GiB + optimizer "
            f"{self.optimizer_gib:.1f} GiB ({dist}) = {self.static_gib:.1f} GiB",
            f"  activations: {self.activations_no_recompute_gib:.1f} GiB without recomputation, "
            f"{self.activations_full_recompute_gib:.1f} GiB with full recomputation; "
            f"this run ({self.recompute}): {self.activations_gib:.1f} GiB",
            f"  total {self.total_gib:.1f} GiB"
            + (f" of {self.gpu_gib:.1f} GiB GPU memory ({100 * self.total_gib / self.gpu_gib:.0f}%)" if self.gpu_gib else
               " (partition GPU memory unknown: no inventory)"),
        ]
        out += [f"  note: {n}" for n in self.notes]
        return out


def _layer_params(m: ModelArgs) -> tuple[int, int]:
    """(dense-part parameters, expert-MLP parameters) of one transformer layer."""
    h = m.hidden_size
    kv = h * m.num_query_groups // m.num_attention_heads
    attn = h * (h + 2 * kv) + h * h + (h + 2 * kv) + h  # QKV + output projection, with biases
    norms = 4 * h
    mlp_mats = 3 if m.swiglu else 2
    if m.num_experts:
        experts = m.num_experts * mlp_mats * h * m.moe_ffn_hidden_size
        router = h * m.num_experts
        return attn + norms + router, experts
    return attn + norms + mlp_mats * h * m.ffn_hidden_size, 0


def estimate_memory(
    m: ModelArgs, *, world: int, tp: int, pp: int, cp: int, ep: int, gpu_memory_mb: int
) -> MemoryEstimate:
    h, s, b, L = m.hidden_size, m.seq_length, m.micro_batch_size, m.num_layers
    dense, expert = _layer_params(m)
    embedding = m.vocab_size * h + (s * h if m.learned_position_embeddings else 0)
    output = m.vocab_size * h if m.untied_embeddings else 0
    params_total = L * (dense + expert) + embedding + output + 2 * h
    layers_per_stage = -(-L // pp)
    # first stage: its layers plus the embedding (the last stage holds the output layer, same size or smaller)
    per_gpu = layers_per_stage * (dense // tp + expert // (tp * ep)) + embedding // tp
    if pp == 1:
        per_gpu += output // tp
    dp = max(1, world // (tp * pp * cp))
    weights = 2 * per_gpu
    grads = 4 * per_gpu  # fp32 main gradients (Megatron accumulates in fp32 with bf16)
    optimizer = (12 * per_gpu / dp) if m.distributed_optimizer else 12 * per_gpu
    # activations: per layer per micro-batch, divided by TP (sequence parallel splits the rest) and CP
    sbh = s * b * h / cp
    sp = tp if (m.sequence_parallel or tp == 1) else 1
    # flash / fused attention (Megatron's default with Transformer Engine) never stores the a*s*s scores;
    # the unfused backends do (the 5*a*s/h term of Korthikanti et al.)
    scores = 5 * m.num_attention_heads * s * s * b / (tp * cp) if m.unfused_attention else 0
    c = layer_activation_coefficient(m)
    # 10 s*b*h of it lie outside the tensor-parallel region (layer-norm inputs, dropout masks, QKV and fc1 inputs):
    # divided by TP only with sequence parallelism
    per_layer_none = sbh * (10 / sp + (c - 10) / tp) + scores
    per_layer_selective = sbh * c / tp if m.sequence_parallel or tp == 1 else sbh * (10 + (c - 10) / tp)
    per_layer_full = sbh * 2 / sp
    in_flight = pp  # 1F1B: the first stage holds PP micro-batches in flight
    logits = 4 * s * b * m.vocab_size / tp / cp if pp == 1 else 0
    # Megatron-LM's megatron/training/theoretical_memory_usage.py compute_activation_memory (d98e8a64dd): the
    # interleaved schedule keeps 1 + (p-1)/(p*v) times more in flight ("Multiply by interleaved PP memory factor",
    # v as arguments.py derives it: virtual_pp); without it, fewer micro-batches than stages keep fewer in flight
    factor = 1.0
    notes = []
    micro = m.global_batch_size // (b * dp) if m.global_batch_size else None
    if m.virtual_pp and pp > 1:
        factor = 1 + (pp - 1) / (pp * m.virtual_pp)
        notes.append(f"interleaved schedule ({m.virtual_pp} chunks per stage): activations x {factor:.2f}")
    elif micro is not None and pp > 1 and micro < pp:
        factor = micro / pp
        notes.append(f"{micro} micro-batch(es) per step < PP={pp}: activations x {factor:.2f}")
    act = {
        "none": per_layer_none * layers_per_stage * in_flight * factor + logits,
        "selective": per_layer_selective * layers_per_stage * in_flight * factor + logits,
        "full": per_layer_full * layers_per_stage * in_flight * factor + sbh * c / tp + logits,
    }
    if m.vocab_assumed:
        notes.append("no --padded-vocab-size/--vocab-size in the arguments: assumed 50304")
    notes.append("estimate without allocator fragmentation, CUDA context (~0.5-1 GiB) or communication buffers")
    return MemoryEstimate(
        params_total=params_total,
        params_per_gpu=per_gpu,
        weights_gib=weights / _GIB,
        grads_gib=grads / _GIB,
        optimizer_gib=optimizer / _GIB,
        activations_gib=act[m.recompute] / _GIB,
        activations_no_recompute_gib=act["none"] / _GIB,
        activations_full_recompute_gib=act["full"] / _GIB,
        gpu_gib=gpu_memory_mb / 1024 if gpu_memory_mb else 0.0,
        distributed_optimizer=m.distributed_optimizer,
        recompute=m.recompute,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class Finding:
    level: str  # error | warning | info
    message: str


def check_layout(
    *, nodes: int, gpus_per_node: int, tp: int, pp: int, cp: int, ep: int, args: tuple[str, ...],
    gpu_memory_mb: int,
) -> tuple[list[Finding], MemoryEstimate | None]:
    """Megatron's own startup assertions, run before the job waits in the queue, and the memory estimate."""
    found: list[Finding] = []
    world = nodes * gpus_per_node
    mp = tp * pp * cp
    if world % mp:
        found.append(Finding("error", f"world size {nodes}x{gpus_per_node}={world} is not divisible by "
                                      f"TP x PP x CP = {tp}x{pp}x{cp} = {mp}"))
    if tp > gpus_per_node:
        found.append(Finding("error", f"TP={tp} > {gpus_per_node} GPUs per node: tensor parallelism would cross "
                                      "the node boundary (all-reduce per layer over the network)"))
    elif gpus_per_node % tp:
        found.append(Finding("error", f"TP={tp} does not divide {gpus_per_node} GPUs per node: some tensor-parallel "
                                      "groups would straddle two nodes (all-reduce per layer over the network)"))
    dp = world // mp if mp and world % mp == 0 else 0
    if ep > 1 and dp and (dp * cp) % ep:
        found.append(Finding("error", f"EP={ep} does not divide DP x CP = {dp}x{cp}"))
    # Megatron-LM's own startup assertions (megatron/training/arguments.py, megatron/core attention), each on the
    # sizes the command line gives, whether or not all four core sizes are there for the memory estimate
    layers, hidden = _int_arg(args, "--num-layers"), _int_arg(args, "--hidden-size")
    heads, seq = _int_arg(args, "--num-attention-heads"), _int_arg(args, "--seq-length")
    groups = _int_arg(args, "--num-query-groups") if "--group-query-attention" in args else None
    mbs, gbs = _int_arg(args, "--micro-batch-size") or 1, _int_arg(args, "--global-batch-size")
    experts = _int_arg(args, "--num-experts") or 0
    if layers is not None and layers % pp:
        found.append(Finding("error", f"--num-layers {layers} is not divisible by PP={pp}"))
    if heads is not None and heads % tp:
        found.append(Finding("error", f"--num-attention-heads {heads} is not divisible by TP={tp}"))
    if hidden is not None and heads and hidden % heads:
        found.append(Finding("error", f"--hidden-size {hidden} is not divisible by --num-attention-heads {heads}"))
    if groups is not None and groups % tp:
        found.append(Finding("error", f"--num-query-groups {groups} is not divisible by TP={tp}"))
    if cp > 1 and seq is not None and seq % (2 * cp):
        found.append(Finding("error", f"--seq-length {seq} is not divisible by 2 x CP = {2 * cp} "
                                      "(context parallelism splits each sequence into 2 x CP load-balanced chunks)"))
    if gbs is not None and dp and gbs % (mbs * dp):
        found.append(Finding("error", f"--global-batch-size {gbs} is not divisible by "
                                      f"--micro-batch-size x DP = {mbs} x {dp}"))
    if experts and experts % ep:
        found.append(Finding("error", f"--num-experts {experts} is not divisible by EP={ep}"))
    vpp = virtual_pp(args, layers, pp)
    found += [Finding("error", e) for e in vpp.errors]
    m = model_args(args)
    if m is None:
        found.append(Finding("info", "no memory estimate: --num-layers/--hidden-size/--num-attention-heads/"
                                     "--seq-length are not all in the script arguments"))
        return found, None
    if any(f.level == "error" for f in found):
        return found, None
    est = estimate_memory(replace(m, virtual_pp=vpp.chunks), world=world, tp=tp, pp=pp, cp=cp, ep=ep,
                          gpu_memory_mb=gpu_memory_mb)
    if vpp.note:
        est = replace(est, notes=(vpp.note, *est.notes))
    if est.gpu_gib:
        if est.static_gib > est.gpu_gib:
            found.append(Finding("error", f"weights+gradients+optimizer need {est.static_gib:.1f} GiB per GPU, the "
                                          f"partition's GPUs have {est.gpu_gib:.1f} GiB: raise TP/PP"
                                          + ("" if m.distributed_optimizer else " or add --use-distributed-optimizer")))
        elif est.total_gib > 0.9 * est.gpu_gib:
            hint = "" if m.recompute == "full" else " (try --recompute-granularity full)"
            found.append(Finding("warning", f"estimated {est.total_gib:.1f} GiB per GPU is over 90% of "
                                            f"{est.gpu_gib:.1f} GiB: likely out of memory{hint}"))
    return found, est


# --- save on preemption: what Megatron-LM handles -------------------------------------------------------------------
# Read in NVIDIA/Megatron-LM (git history, d98e8a64dd and before):
#   * --exit-signal-handler (dbe6c7285d, 2021, "Add support for signal-based dynamic checkpointing"; in every release
#     since 23.04): global_vars.py installs megatron/training/dist_signal_handler.py's DistributedSignalHandler for one
#     signal; its handler only sets a flag. After every iteration training.py (checkpoint_and_decide_exit) all-gathers
#     the flag over the ranks (signals_received) and, when any rank has it, saves (with --save) and leaves the loop;
#     the process exits 0. Without the flag the signal keeps its default action: the process dies, nothing is saved.
#   * the signal: SIGTERM only until 265af20c16 (core_v0.16.0), which added --exit-signal with the choices SIGTERM,
#     SIGINT, SIGUSR1, SIGUSR2 (earlier parsers refuse the flag); since 72230d25ca any signal.Signals name. SIGUSR2,
#     Slurm's warning signal, is not handled unless --exit-signal SIGUSR2 says so: its default action kills the rank.
#   * --exit-signal-handler-for-training (a61ce5f6fa, 26.04): installed after the exit handler, it replaces the SIGINT
#     and SIGTERM handlers with _graceful_shutdown (barrier, destroy the process group, exit): no save on those signals.
#   * no Megatron-LM commit has an --exit-signal-handler-interval (searched every ref): the flag is checked every
#     iteration, so a rank saves at most one iteration after the signal.
EXIT_HANDLER_FLAG = "--exit-signal-handler"
EXIT_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")  # core_v0.16.0's choices, accepted by every later parser


# Megatron-LM's record of its latest save, in the --save directory, the iteration as text ("release" for a converted
# checkpoint): megatron/training/checkpointing.py get_checkpoint_tracker_filename. The batch shell reads it before and
# after the step: a changed value is the attempt's checkpoint ("requeued after checkpoint at step N").
TRACKER = "latest_checkpointed_iteration.txt"


def exit_signal(args: tuple[str, ...]) -> str:
    """The signal Megatron's handler waits for: --exit-signal in the script arguments, else SIGTERM."""
    return arg_value(args, "--exit-signal") or "SIGTERM"


def signal_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """Megatron arguments gpusub adds so that a preemption is a save: --exit-signal-handler when it is not there."""
    return () if EXIT_HANDLER_FLAG in args else (EXIT_HANDLER_FLAG,)


def signal_findings(args: tuple[str, ...]) -> list[Finding]:
    """What in the script arguments stops Megatron from saving when gpusub delivers the exit signal."""
    sig = exit_signal(args)
    if sig not in EXIT_SIGNALS:
        return [Finding("error", f"--exit-signal {sig}: gpusub delivers one of {', '.join(EXIT_SIGNALS)} to the ranks "
                                 "(Megatron-LM's own choices, core_v0.16.0)")]
    out = []
    if "--exit-signal-handler-for-training" in args and sig in ("SIGTERM", "SIGINT"):
        out.append(Finding("warning", f"--exit-signal-handler-for-training replaces Megatron's {sig} handler with an "
                                      "exit that saves nothing (global_vars.py _graceful_shutdown): a preemption, "
                                      "requeue or time limit loses the work since the last --save-interval; drop it "
                                      "or give --exit-signal SIGUSR1"))
    if arg_value(args, "--save") is None:
        out.append(Finding("warning", "no --save in the script arguments: on a preemption, requeue or time limit "
                                      "Megatron exits without a checkpoint (training.py checkpoint_and_decide_exit "
                                      "saves only with --save) and the requeued job starts over"))
    return out
