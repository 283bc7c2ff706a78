"""The CLI's verbs: one module each, with ``register(subparsers)`` and ``run(args) -> int``.

:data:`COMMANDS` is the verb table (as pip's ``commands_dict``): each verb's name and the line
``--help`` shows for it. The command line imports only the module of the verb it runs
(``rocmforge/cli/commands/NAME.py``); ``rocmforge --help`` imports none. To add a verb, write
its module and list it here. Command modules import the core lazily, inside ``run``, so parsing
stays cheap; the read verbs (list, pins, query, show, du, log, audit) answer the common case from
the import-light readers of :mod:`rocmforge.store.readers`.
"""

#: verb -> its one-line summary (the help of its sub-parser), in ``--help`` order
COMMANDS: dict[str, str] = {
    "realize": "build a recipe (or reuse the cached build)",
    "plan": "show the derivation and input hash, without building",
    "log": "print the build log of a build",
    "trace": "write a build's timeline (phases, steps, ninja edges, memory) as Chrome trace JSON",
    "report": "write a build's one-page HTML report (timeline, slowest edges, memory, sizes)",
    "lock": "pin a git ref to a full commit and build requirements to wheel digests",
    "outdated": "list newer releases of a recipe's pins (git tags, Python index, ROCm SDK)",
    "audit": "tell what produced a wheel (verified / claimed / diverged / tampered / unknown)",
    "explain": "show key by key why two builds differ",
    "bisect": "find the commit that broke or slowed a build (every step cached in the store)",
    "query": "find store entries by name, version, env flag or age",
    "list": "list store entries: hash, name, version, size, created, last used, roots",
    "show": "show everything about one store entry",
    "verify": "re-hash store entries and check the index; non-zero exit on any problem",
    "doctor": "show ROCm, GPUs, RAM, cores and sandbox; lint a recipe; --comm: will NCCL connect",
    "gc": "delete unrooted entries (all, or by --keep-last/--older-than/--max-size)",
    "pin": "keep an entry through every gc under a name",
    "unpin": "remove a pin (gc may then collect its entry)",
    "pins": "list pins",
    "du": "show the store's size by area, package and entry",
    "key": "generate or show the ed25519 key that signs provenance",
    "export": "write a closure's wheels as a simple index, find-links dir and constraints.txt",
    "sign": "add the signing key's signature to store entries (nothing rebuilt)",
    "farm": "(a Slurm job, on its node) sign a scratch entry for the submitter, or say why not",
    "push": "upload store entries to a binary cache, signing them (only what it lacks)",
    "cache": "list or prune a binary cache (file://DIR, oci://HOST/REPO)",
    "test": "run GPU acceptance checks on built wheels (their closure) or an environment's torch",
    "config": "show the effective configuration (caches, trusted keys) and where it came from",
}
