"""The free-form side: captions counted by CHAIR (chair/) and AMBER (amber/), and decoding methods compared on them (comparison/)."""
