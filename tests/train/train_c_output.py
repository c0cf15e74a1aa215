"""train_c_output.py: reads what tests/train/train_c.c prints (one line per row: "main POS v...",
"stream POS J v...", "pruned POS 0|1") into the dictionaries the train tests compare with PyTorch."""
import numpy as np


def parse(stdout):
    res = {"main": {}, "stream": {}, "pruned": {}}
    for line in stdout.splitlines():
        f = line.split()
        if f[0] == "main":
            res["main"][int(f[1])] = np.array(f[2:], dtype=np.float64)
        elif f[0] == "stream":
            res["stream"][(int(f[1]), int(f[2]))] = np.array(f[3:], dtype=np.float64)
        elif f[0] == "pruned":
            res["pruned"][int(f[1])] = f[2] == "1"
    return res
