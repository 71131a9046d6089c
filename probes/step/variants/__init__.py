"""Changes to the step and how they are measured: the named variants (catalog; their store names in names,
torch-free), stacks of them (stacks), library variants (libvariants), the settings a lab makes for a stack
(settings); each measured in its own fresh process (processes starts worker; measurement is the Spec that goes
and the Measurement that comes back), predicted before measured (whatif, from microbench), priced in numerics
(numerics), and the fastest stack searched for (search)."""
