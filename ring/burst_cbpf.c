/* SPDX-License-Identifier: BSD-3-Clause */
#include "burst_cbpf.h"

/* linux/bpf_common.h's fields of an instruction's code. */
#define KB_CLASS(c) ((c) & 0x07)
#define KB_SIZE(c) ((c) & 0x18)
#define KB_MODE(c) ((c) & 0xe0)
#define KB_OP(c) ((c) & 0xf0)
#define KB_SRC(c) ((c) & 0x08)

enum { KB_LD = 0x00, KB_LDX = 0x01, KB_ST = 0x02, KB_STX = 0x03, KB_ALU = 0x04,
       KB_JMP = 0x05, KB_RET = 0x06, KB_MISC = 0x07 };
enum { KB_W = 0x00, KB_H = 0x08, KB_B = 0x10 };
enum { KB_IMM = 0x00, KB_ABS = 0x20, KB_IND = 0x40, KB_MEM = 0x60, KB_LEN = 0x80, KB_MSH = 0xa0 };

/* Loads size bytes at off, big-endian, into *v; 0 when outside p[0..len). */
static int
kb_cbpf_load(const uint8_t *p, uint32_t len, uint64_t off, uint32_t size, uint32_t *v)
{
	uint32_t i, r = 0;

	if (off > len || len - off < size)
		return 0;
	for (i = 0; i < size; i++)
		r = r << 8 | p[off + i];
	*v = r;
	return 1;
}

static uint32_t
kb_cbpf_alu(uint16_t op, uint32_t a, uint32_t b, int *div0)
{
	switch (op) {
	case 0x00: return a + b;
	case 0x10: return a - b;
	case 0x20: return a * b;
	case 0x30: if (b == 0) { *div0 = 1; return 0; } return a / b;
	case 0x40: return a | b;
	case 0x50: return a & b;
	case 0x60: return a << (b & 31);
	case 0x70: return a >> (b & 31);
	case 0x80: return -a;
	case 0x90: if (b == 0) { *div0 = 1; return 0; } return a % b;
	case 0xa0: return a ^ b;
	}
	*div0 = 2; /* not an operation: the program is not ours to judge */
	return 0;
}

uint32_t
kb_cbpf_run(const struct kb_cbpf_insn *insn, uint16_t n, const uint8_t *p, uint32_t len)
{
	uint32_t a = 0, x = 0, m[16] = { 0 }, v, size;
	uint16_t pc = 0;
	int bad;

	while (pc < n) {
		const struct kb_cbpf_insn *f = &insn[pc++];
		uint32_t k = f->k;

		switch (KB_CLASS(f->code)) {
		case KB_LD:
		case KB_LDX:
			size = KB_SIZE(f->code) == KB_W ? 4 : KB_SIZE(f->code) == KB_H ? 2 : 1;
			switch (KB_MODE(f->code)) {
			case KB_IMM: v = k; break;
			case KB_MEM: v = m[k & 15]; break;
			case KB_LEN: v = len; break;
			case KB_ABS:
				if (!kb_cbpf_load(p, len, k, size, &v))
					return 1;
				break;
			case KB_IND:
				if (!kb_cbpf_load(p, len, (uint64_t)x + k, size, &v))
					return 1;
				break;
			case KB_MSH:
				if (!kb_cbpf_load(p, len, k, 1, &v))
					return 1;
				v = (v & 0xf) << 2;
				break;
			default:
				return 1;
			}
			if (KB_CLASS(f->code) == KB_LD)
				a = v;
			else
				x = v;
			break;
		case KB_ST:
			m[k & 15] = a;
			break;
		case KB_STX:
			m[k & 15] = x;
			break;
		case KB_ALU:
			bad = 0;
			a = kb_cbpf_alu(KB_OP(f->code), a, KB_SRC(f->code) ? x : k, &bad);
			if (bad == 1)
				return 0; /* a division by zero ends the program, refused */
			if (bad)
				return 1;
			break;
		case KB_JMP: {
			uint32_t b = KB_SRC(f->code) ? x : k, off;
			int c;

			switch (KB_OP(f->code)) {
			case 0x00: off = k; goto jump;
			case 0x10: c = a == b; break;
			case 0x20: c = a > b; break;
			case 0x30: c = a >= b; break;
			case 0x40: c = (a & b) != 0; break;
			default: return 1;
			}
			off = c ? f->jt : f->jf;
jump:
			if (off >= (uint32_t)(n - pc))
				return 1;
			pc = (uint16_t)(pc + off);
			break;
		}
		case KB_RET:
			return (f->code & 0x18) == 0x10 ? a : (f->code & 0x18) == 0x08 ? x : k;
		case KB_MISC:
			if (f->code & 0x80)
				a = x;
			else
				x = a;
			break;
		}
	}
	return 1;
}
