"""Language-model text: the word tokenizer, synthetic fact corpora, MCQ/text readers, LM unlearning data."""
