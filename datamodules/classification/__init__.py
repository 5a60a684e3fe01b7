"""Classification data: images and digits with forget sets for unlearning, the K-answer task."""
