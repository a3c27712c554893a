# The corpus's Python program, run by Debian's /usr/bin/python3: ROUNDS
# (its argument) rounds of dictionaries, sorting, string formatting and big integers,
# all inside the interpreter's C code.
import sys

def sort_round(n, seed):
    a = [(i * 2654435761 + seed) % 1000003 for i in range(n)]
    a.sort()
    return a[n // 2]

def count_words(n, seed):
    counts = {}
    for i in range(n):
        w = "w%d" % ((i * 7919 + seed) % 5000)
        counts[w] = counts.get(w, 0) + 1
    return len(counts)

def big(n):
    x = 1
    for i in range(1, n):
        x = x * i % (1 << 4096)
    return x & 0xffff

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
total = 0
for seed in range(rounds):
    total += sort_round(50000, seed) + count_words(50000, seed) + big(3000)
print("sum", total)
