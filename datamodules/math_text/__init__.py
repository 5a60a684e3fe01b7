"""Math as text: MATH-style records and answers, the noisy addition task, arith_em and GSM8K prompts."""
