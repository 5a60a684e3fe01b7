"""Pieces shared by several data domains: the JSON records reader and the phased unlearning base."""
