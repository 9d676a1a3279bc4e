//! A tiny classic-BPF assembler for seccomp filters, with forward labels.
//!
//! Only what the allowlist needs: load a 32-bit word of `seccomp_data`,
//! `and` with a constant, compare with a constant (`jeq`, `jge`) and
//! return an action. Jumps name labels; [`Assembler::finish`] resolves them
//! to the 8-bit forward offsets classic BPF encodes, and refuses a program
//! whose jumps do not fit (rather than emitting a wrong one).
//!
//! What this module is not: a general BPF toolkit. The kernel verifies the
//! program again when it is installed.

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if the comparison holds.
    pub jt: u8,
    /// Jump offset if it does not.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

// Opcodes (linux/filter.h, linux/bpf_common.h).
/// `BPF_LD | BPF_W | BPF_ABS` (`BPF_LD` and `BPF_W` are 0).
pub const LD_W_ABS: u16 = 0x20;
pub const ALU_AND_K: u16 = 0x04 | 0x50; // BPF_ALU | BPF_AND | BPF_K
pub const JMP_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
pub const JMP_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
pub const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// A position in the program, resolved by [`Assembler::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Where a conditional jump goes.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// The next instruction.
    Next,
    /// A label placed later.
    To(Label),
}

#[derive(Clone, Copy, Debug)]
enum Pending {
    Ready(Insn),
    Jump {
        code: u16,
        k: u32,
        jt: Target,
        jf: Target,
    },
}

/// Builds a program; see the module docs.
#[derive(Debug, Default)]
pub struct Assembler {
    code: Vec<Pending>,
    /// Instruction index of each placed label (`None` until placed).
    labels: Vec<Option<usize>>,
}

/// A jump that does not fit classic BPF's 8-bit offsets, or a label that
/// was never placed or points backwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssembleError(pub String);

impl Assembler {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new, not yet placed label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Place `label` at the next instruction.
    pub fn place(&mut self, label: Label) {
        if let Some(slot) = self.labels.get_mut(label.0) {
            *slot = Some(self.code.len());
        }
    }

    /// `A = *(u32 *)(seccomp_data + offset)`.
    pub fn load(&mut self, offset: u32) {
        self.emit(LD_W_ABS, offset);
    }

    /// `A &= mask`.
    pub fn and(&mut self, mask: u32) {
        self.emit(ALU_AND_K, mask);
    }

    /// `return action`.
    pub fn ret(&mut self, action: u32) {
        self.emit(RET_K, action);
    }

    /// `if A == k goto jt else goto jf`.
    pub fn jeq(&mut self, k: u32, jt: Target, jf: Target) {
        self.jump(JMP_JEQ_K, k, jt, jf);
    }

    /// `if A >= k goto jt else goto jf`.
    pub fn jge(&mut self, k: u32, jt: Target, jf: Target) {
        self.jump(JMP_JGE_K, k, jt, jf);
    }

    fn emit(&mut self, code: u16, k: u32) {
        self.code.push(Pending::Ready(Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }));
    }

    fn jump(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.code.push(Pending::Jump { code, k, jt, jf });
    }

    /// Resolve every label; fails if a jump is backwards, unplaced or
    /// longer than 255 instructions, or the program is empty or longer
    /// than the kernel's 4096 instructions.
    pub fn finish(self) -> Result<Vec<Insn>, AssembleError> {
        if self.code.is_empty() || self.code.len() > 4096 {
            return Err(AssembleError(format!(
                "a filter must have 1..=4096 instructions, not {}",
                self.code.len()
            )));
        }
        let offset =
            |at: usize, target: Target| -> Result<u8, AssembleError> {
                let Target::To(label) = target else {
                    return Ok(0);
                };
                let placed =
                    self.labels.get(label.0).copied().flatten().ok_or_else(|| {
                        AssembleError(format!("label {} was never placed", label.0))
                    })?;
                // Offsets count from the instruction after the jump.
                placed
                    .checked_sub(at + 1)
                    .and_then(|distance| u8::try_from(distance).ok())
                    .ok_or_else(|| {
                        AssembleError(format!(
                            "jump from {at} to {placed} does not fit a forward 8-bit offset"
                        ))
                    })
            };
        self.code
            .iter()
            .enumerate()
            .map(|(at, pending)| match *pending {
                Pending::Ready(insn) => Ok(insn),
                Pending::Jump { code, k, jt, jf } => Ok(Insn {
                    code,
                    jt: offset(at, jt)?,
                    jf: offset(at, jf)?,
                    k,
                }),
            })
            .collect()
    }
}

/// Run `program` on a `seccomp_data` image (little-endian words) the way the
/// kernel would, for tests. Returns the action, or `None` for a program that
/// runs off its end or reads outside the data (the kernel rejects both).
#[cfg(test)]
pub fn run(program: &[Insn], data: &[u8; 64]) -> Option<u32> {
    let mut accumulator: u32 = 0;
    let mut pc = 0usize;
    while let Some(insn) = program.get(pc) {
        pc += 1;
        match insn.code {
            LD_W_ABS => {
                let at = usize::try_from(insn.k).ok()?;
                let word = data.get(at..at + 4)?;
                accumulator = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            }
            ALU_AND_K => accumulator &= insn.k,
            RET_K => return Some(insn.k),
            JMP_JEQ_K | JMP_JGE_K => {
                let holds = if insn.code == JMP_JEQ_K {
                    accumulator == insn.k
                } else {
                    accumulator >= insn.k
                };
                pc += usize::from(if holds { insn.jt } else { insn.jf });
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn resolves_forward_labels_relative_to_the_next_instruction() {
        let mut asm = Assembler::new();
        let yes = asm.label();
        asm.load(0);
        asm.jeq(7, Target::To(yes), Target::Next);
        asm.ret(1);
        asm.place(yes);
        asm.ret(2);
        let program = asm.finish().unwrap();
        assert_eq!(program[1].jt, 1);
        assert_eq!(program[1].jf, 0);
        let mut data = [0u8; 64];
        data[0] = 7;
        assert_eq!(run(&program, &data), Some(2));
        data[0] = 8;
        assert_eq!(run(&program, &data), Some(1));
    }

    #[test]
    fn refuses_unplaced_and_too_long_jumps() {
        let mut asm = Assembler::new();
        let nowhere = asm.label();
        asm.load(0);
        asm.jeq(1, Target::To(nowhere), Target::Next);
        asm.ret(0);
        assert!(asm.finish().is_err());

        let mut asm = Assembler::new();
        let far = asm.label();
        asm.load(0);
        asm.jeq(1, Target::To(far), Target::Next);
        for _ in 0..256 {
            asm.ret(0);
        }
        asm.place(far);
        asm.ret(1);
        assert!(asm.finish().is_err());
    }

    #[test]
    fn refuses_an_empty_program() {
        assert!(Assembler::new().finish().is_err());
    }
}
