# simulate the zt epilogue's h^T transpose: codes (k, c) -> ct row c, byte k (one warpgroup: 64 rows k, 128 cols c)
import itertools
box = {}  # byte address -> (k, c)
def unitval(k, J, q):  # the unit of row k, group J, q: bytes (c, c+1) with c = 8J + 2q
    c = 8*J + 2*q
    return [(k, c), (k, c+1)]
for w in range(4):
    for X in range(4):
        # each lane's registers
        regs = {}
        for lane in range(32):
            r = 16*w + lane//4
            q = lane % 4
            v = []
            for I in range(4):
                j, hh = 4*X + 2*(I//2), I % 2
                k = r + 8*hh
                v.append(unitval(k, j, q) + unitval(k, j+1, q))  # low 16: group j, high 16: group j+1
            regs[lane] = v
        # addresses
        addr = {}
        for lane in range(32):
            l8, li = lane % 8, lane // 8
            u = 4*(4*X + 2*(li//2) + l8 % 2) + l8//2
            kb8 = 2*w + li % 2
            addr[lane] = u*128 + ((kb8 ^ (u % 8)) * 16)
        # stmatrix x4 trans: matrix i: element (a, col) from lane 4a + col//2, register i, half col%2
        for i in range(4):
            for b in range(8):  # destination row b of matrix i
                base = addr[8*i + b]
                for a in range(8):
                    lane = 4*a + b//2
                    half = b % 2
                    elem = regs[lane][i][2*half:2*half+2]  # two bytes
                    for by in range(2):
                        box[base + 2*a + by] = elem[by]
# readback
ct = {}
for t in range(128):
    kb8 = t % 8
    for I in range(4):
        u = t//8 + 16*I
        a = u*128 + ((kb8 ^ (u % 8)) * 16)
        q = [box[a + x] for x in range(16)]
        c = 8*(u//4) + 2*(u % 4)
        lo = [q[0], q[2], q[4], q[6], q[8], q[10], q[12], q[14]]  # prmt 0x6420 on (q0,q1), (q2,q3)
        hi = [q[1], q[3], q[5], q[7], q[9], q[11], q[13], q[15]]
        for x in range(8):
            ct[(c, 8*kb8 + x)] = lo[x]
            ct[(c+1, 8*kb8 + x)] = hi[x]
bad = sum(1 for (c, k), v in ct.items() if v != (k, c))
print("entries", len(ct), "bad", bad, "box bytes", len(box))
# bank conflicts: stmatrix per matrix 8 rows of 16B: chunk banks distinct
