"""train_c_output.py: reads what tests/train/train_c.c prints (one line per row: "main POS v...",
"stream POS J v...", "pruned POS 0|1", "exit POS p") into the dictionaries the train tests compare
with PyTorch."""
import numpy as np


def parse(stdout):
    res = {"main": {}, "stream": {}, "pruned": {}, "exit": {}}
    for line in stdout.splitlines():
        f = line.split()
        if f[0] == "main":
            res["main"][int(f[1])] = np.array(f[2:], dtype=np.float64)
        elif f[0] == "stream":
            res["stream"][(int(f[1]), int(f[2]))] = np.array(f[3:], dtype=np.float64)
        elif f[0] == "pruned":
            res["pruned"][int(f[1])] = f[2] == "1"
        elif f[0] == "exit":
            res["exit"][int(f[1])] = float(f[2])
    return res
